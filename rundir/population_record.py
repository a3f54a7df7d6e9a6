"""What a population records (rundir/population.py runs it): its copies, from
the scheduler's decision to the recipient's folder, the donors' rows of
them, and the summary.

A copy is recorded in three steps:
1. the scheduler decides it and writes `copies.pending/<recipient>.json`
   (`decide`);
2. the recipient installs the donor's checkpoint in its run folder and only
   then appends the copy to `events.jsonl` and queues the donor's row in the
   ledger (`installed`), so an interrupt between the two records nothing;
3. the donor writes its row at its next interval (the ledger), or the
   population's end does (`write_missing_donor_rows`).

The ledger is a named Ray actor, looked up by name: nothing that Ray Tune
pickles (the trainable's parameters, the scheduler) holds a Ray handle, so
a population's saved state can be restored by a later driver.

`population.json` (`summarise`) says whether the population finished: every
member at total_env_steps without a failure.

`population_settings.json` (`fixed_settings`) holds what a resume cannot
change: Ray Tune restores the members, the scheduler and the stop rule the
first driver gave it, so a later driver's different total_env_steps or pbt
setting would be ignored; `changed_settings` names them for the refusal.
"""

import datetime
import json
import os
import re
import shutil
from typing import List, Optional

from infra import atomic_write
from rundir import run_folder

MEMBERS = 'members'
EVENTS = 'events.jsonl'
SUMMARY = 'population.json'
PENDING = 'copies.pending'
SETTINGS = 'population_settings.json'
LEDGER_NAME = 'pbt_copy_ledger'


def member_name(trial_id: str) -> str:
  """A member's folder name from its Ray trial id.

  Args:
    trial_id: Ray Tune's trial id, '<experiment>_<index>'.

  Returns:
    'member_' + the part after the last '_' ('a1b2c_00003' -> 'member_00003').
  """
  return 'member_' + trial_id.rsplit('_', 1)[-1]


def donor_row(event: dict) -> dict:
  """The donor's record of a copy; written at the donor's env step then,
  the copied checkpoint's step is 'pbt/copied_step'."""
  return {'pbt/copied_to': event['recipient'], 'pbt/copied_step': event['env_steps'],
          'pbt/recipient_score': event['recipient_score']}


def decide(population_dir: str, event: dict) -> None:
  """Step 1: the scheduler's decision of a copy, pending until installed.

  Args:
    population_dir: the population folder.
    event: time, donor, recipient, env_steps, donor_score,
      recipient_score, new_values.
  """
  folder = os.path.join(population_dir, PENDING)
  os.makedirs(folder, exist_ok=True)
  with atomic_write.atomic_open(os.path.join(folder, f'{event["recipient"]}.json')) as f:
    f.write(json.dumps(event))


def installed(population_dir: str, recipient: str, donor_info: dict, values: dict) -> dict:
  """Step 2: a copy installed in the recipient's folder, appended to events.jsonl.

  The scheduler's pending decision for the recipient supplies the scores
  and time when it names the same donor and step; otherwise (a decision
  from before an interrupt, restored by Ray Tune) they come from the
  donor's checkpoint and the recipient's score is unknown (None).

  Args:
    population_dir: the population folder.
    recipient: the member that installed the copy.
    donor_info: the donor checkpoint's member.json (member, env_steps,
      score).
    values: the recipient's hyperparameters now.

  Returns:
    The event as written.
  """
  path = os.path.join(population_dir, PENDING, f'{recipient}.json')
  pending = {}
  try:
    with open(path) as f:
      pending = json.load(f)
  except (OSError, ValueError):
    pass
  if (pending.get('donor') != donor_info['member']
      or pending.get('env_steps') != int(donor_info['env_steps'])):
    pending = {}
  event = {'time': pending.get('time'), 'donor': donor_info['member'], 'recipient': recipient,
           'env_steps': int(donor_info['env_steps']),
           'donor_score': pending.get('donor_score', donor_info.get('score')),
           'recipient_score': pending.get('recipient_score'), 'new_values': dict(values),
           'installed': datetime.datetime.now().isoformat(timespec='seconds')}
  with open(os.path.join(population_dir, EVENTS), 'a') as f:   # one short line: one write
    f.write(json.dumps(event) + '\n')
  if pending:
    try:
      os.remove(path)
    except OSError:
      pass
  return event


def was_installed(population_dir: str, recipient: str, donor_info: dict) -> bool:
  """Whether events.jsonl records this copy (donor and env step) as installed
  in `recipient` already.

  Args:
    population_dir: the population folder.
    recipient: the member restoring the checkpoint.
    donor_info: the checkpoint's member.json (member, env_steps).
  """
  step = int(donor_info['env_steps'])
  return any(e['recipient'] == recipient and e['donor'] == donor_info['member']
             and e['env_steps'] == step for e in read_events(population_dir))


def clear_pending(population_dir: str) -> None:
  """Removes copies.pending/ of a finished population: a decision no member
  installed (the population ended first) was never a copy."""
  shutil.rmtree(os.path.join(population_dir, PENDING), ignore_errors=True)


def describe(event: dict) -> str:
  """The progress line of an installed copy."""
  score = lambda x: 'unknown' if x is None else f'{x:.4g}'
  return (f'pbt: {event["recipient"]} (score {score(event["recipient_score"])}) copied '
          f'{event["donor"]} (score {score(event["donor_score"])}) at env step '
          f'{event["env_steps"]:,}; now ' + ', '.join(
              f'{k}={v:.3g}' for k, v in event['new_values'].items()))


def read_events(population_dir: str) -> List[dict]:
  """The installed copies of events.jsonl, in order; [] without the file."""
  path = os.path.join(population_dir, EVENTS)
  return run_folder.read_jsonl(path) if os.path.exists(path) else []


def write_missing_donor_rows(population_dir: str) -> None:
  """Each copy in events.jsonl that its donor did not record (it finished
  before its next interval, or the ledger was unreachable): written into
  the donor's metrics now, at its last env step (its run folder is closed)."""
  for event in read_events(population_dir):
    path = run_folder.metrics_path(os.path.join(population_dir, MEMBERS, event['donor']))
    if not os.path.exists(path):
      continue
    rows = run_folder.read_jsonl(path)
    row = donor_row(event)
    if any(r.get('pbt/copied_to') == row['pbt/copied_to'] and
           r.get('pbt/copied_step') == row['pbt/copied_step'] for r in rows):
      continue
    last = max((int(r['env_steps']) for r in rows if 'env_steps' in r), default=0)
    with open(path, 'a') as f:
      f.write(json.dumps({**row, 'env_steps': last}) + '\n')


def summarise(results, population_dir: str, settings, total_env_steps: int) -> dict:
  """Writes population.json from Ray Tune's results and events.jsonl.

  Args:
    results: Ray Tune's ResultGrid (or a list of its results).
    population_dir: the population folder.
    settings: the checked PBT settings (configs.pbt.check).
    total_env_steps: the env steps every member trains to.

  Returns:
    The summary: 'members' (per member, sorted by name: member, score,
    env_steps, values, copied_from, copied_to, error), 'copies', 'failed',
    'best_score', 'score_kind' and 'finished' (every member at
    total_env_steps, none failed); written whole or not at all.
  """
  events = read_events(population_dir)
  members, failed = [], []
  for result in results:
    metrics = result.metrics or {}
    name = _result_member(result)
    if metrics.get('member') != name:   # the donor's last result, set by Ray at a copy
      metrics = {**metrics, **_own_progress(population_dir, name)}
    row = {'member': name, 'score': metrics.get('score'), 'env_steps': metrics.get('env_steps'),
           'values': {k: metrics.get(k, (result.config or {}).get(k)) for k in settings.ranges},
           'copied_from': [e['donor'] for e in events if e['recipient'] == name],
           'copied_to': [e['recipient'] for e in events if e['donor'] == name],
           'error': None}
    if result.error is not None:
      first = next((line for line in str(result.error).splitlines() if line.strip()), '')
      row['error'] = f'{type(result.error).__name__}: {first}'[:500]
      failed.append(name)
    members.append(row)
  members.sort(key=lambda r: r['member'])
  scores = [r['score'] for r in members if r['score'] is not None and r['error'] is None]
  finished = bool(members) and not failed and all(
      (r['env_steps'] or 0) >= total_env_steps for r in members)
  summary = {'members': members, 'copies': len(events), 'failed': failed,
             'best_score': max(scores) if scores else None, 'score_kind': settings.score_kind
             if settings.metric == 'auto' else settings.metric, 'finished': finished}
  with atomic_write.atomic_open(os.path.join(population_dir, SUMMARY)) as f:
    json.dump(summary, f, indent=1)
  return summary


def _result_member(result) -> str:
  """The member a Ray Tune result is of, from its trial's folder name
  ('Member_9b6e2_00001_1_<date>' -> 'member_00001'): after a copy, Ray
  gives a trial the donor's last result, so its metrics can name the donor.
  Falls back to the metrics' trial id when the folder name is not Ray's."""
  found = re.match(r'[^_]+_([0-9a-f]+_\d+)_', os.path.basename(os.path.normpath(result.path)))
  if found:
    return member_name(found.group(1))
  return member_name(str((result.metrics or {}).get('trial_id', '')))


def _own_progress(population_dir: str, name: str) -> dict:
  """{'score', 'env_steps'} of a member's last PBT interval, read from its
  own metrics.jsonl ({} when it has none)."""
  path = os.path.join(population_dir, MEMBERS, name, 'metrics.jsonl')
  try:
    rows = [r for r in run_folder.read_jsonl(path) if 'pbt/score' in r]
  except OSError:
    return {}
  return {'score': rows[-1]['pbt/score'], 'env_steps': rows[-1]['env_steps']} if rows else {}


def finished_at(population_dir: str, total_env_steps: int) -> Optional[dict]:
  """The summary of a population already finished at total_env_steps, else None.

  Finished: population.json says so (or, written before it said, no member
  failed) and every member is at total_env_steps or past it. An unreadable
  population.json is not finished (the population is resumed).
  """
  try:
    with open(os.path.join(population_dir, SUMMARY)) as f:
      summary = json.load(f)
    members = summary['members']
    done = summary.get('finished', not summary.get('failed'))
    if done and members and all((m.get('env_steps') or 0) >= total_env_steps for m in members):
      return summary
  except (OSError, ValueError, KeyError, TypeError):
    pass
  return None


def fixed_settings(settings, total_env_steps: int) -> dict:
  """What a population keeps from its first driver, by config field.

  Args:
    settings: the checked pbt settings (configs/pbt.py Settings).
    total_env_steps: the run's total per member.

  Returns:
    {field: value}, JSON-ready: total_env_steps and the pbt group as Ray
    Tune's trials and scheduler hold it (the interval resolved from 0).
  """
  return {
      'total_env_steps': int(total_env_steps), 'pbt.population': settings.population,
      'pbt.adapt': sorted(settings.ranges),
      'pbt.ranges': {k: [float(lo), float(hi)] for k, (lo, hi) in sorted(settings.ranges.items())},
      'pbt.interval_env_steps': settings.interval, 'pbt.metric': settings.metric,
      'pbt.last_episodes': settings.last_episodes, 'pbt.quantile': settings.quantile,
      'pbt.resample_probability': settings.resample_probability,
      'pbt.perturb_factors': [float(f) for f in settings.perturb_factors],
      'pbt.cpus_per_member': settings.cpus_per_member, 'pbt.start': settings.start}


def write_settings(population_dir: str, fixed: dict) -> None:
  """Writes `fixed` (fixed_settings) to population_settings.json, whole or
  not at all.

  Raises:
    rundir.run_folder.RunFolderError: when it cannot be written (a full
      disk), naming the file.
  """
  path = os.path.join(population_dir, SETTINGS)
  try:
    with atomic_write.atomic_open(path) as f:
      json.dump(fixed, f, indent=1)
  except OSError as e:
    raise run_folder.RunFolderError(f'cannot write {path}: {e.strerror or e}') from None


def changed_settings(population_dir: str, fixed: dict) -> List[tuple]:
  """The fields of `fixed` that differ from what the population started
  with, as (field, started with, now); [] for a population that recorded
  none (one started before population_settings.json was written).

  Raises:
    rundir.run_folder.RunFolderError: when population_settings.json cannot
      be read, naming it.
  """
  path = os.path.join(population_dir, SETTINGS)
  if not os.path.exists(path):
    return []
  try:
    with open(path) as f:
      saved = json.load(f)
  except (OSError, ValueError) as e:
    raise run_folder.RunFolderError(
        f'cannot read {path} ({e}); the population cannot be checked for resuming. Restore it '
        'or choose another --config.workdir') from None
  return [(k, saved[k], v) for k, v in fixed.items() if k in saved and saved[k] != v]


def check_unchanged(population_dir: str, fixed: dict) -> None:
  """Refuses a resume whose `fixed` (fixed_settings) differs from what the
  population started with.

  Raises:
    rundir.run_folder.RunFolderError: naming each changed field with both
      values, or when population_settings.json cannot be read.
  """
  changed = changed_settings(population_dir, fixed)
  if changed:
    raise run_folder.RunFolderError(
        f'cannot resume {population_dir} with different population settings: '
        + '; '.join(f'{field} {json.dumps(now)} (it started with {json.dumps(saved)})'
                    for field, saved, now in changed)
        + f' ({SETTINGS}). Ray Tune restores the members, the scheduler and the stop rule it '
        'started with, so these would be ignored: undo these overrides, or start a new '
        'population in another --config.workdir')
