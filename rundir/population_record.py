"""What a population records: its copies, from the scheduler's decision to
the recipient's folder, the donors' rows of them, and the summary.

A copy goes `decide` (copies.pending/<recipient>.json), then `installed`
(appended to events.jsonl only once the checkpoint is in the recipient's
folder, so an interrupt between records nothing), then the donor's row at
its next interval or `write_missing_donor_rows`. The ledger is looked up by
name so nothing Ray Tune pickles holds a Ray handle. population_settings.json
holds what a resume cannot change, as Ray Tune restores the first driver's.
"""

import datetime
import glob
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
VALUES = 'pbt_member.json'   # in a member's folder: its name and current hyperparameters
STOPPED = 'stopped by SIGTERM'


def member_name(trial_id: str) -> str:
  """'member_' + the part after the trial id's last '_' ('a1b2c_00003' -> 'member_00003')."""
  return 'member_' + trial_id.rsplit('_', 1)[-1]


def donor_row(event: dict) -> dict:
  """The donor's record of a copy (written at the donor's own env step)."""
  return {'pbt/copied_to': event['recipient'], 'pbt/copied_step': event['env_steps'],
          'pbt/recipient_score': event['recipient_score']}


def decide(population_dir: str, event: dict) -> None:
  """Step 1: the scheduler's decision of a copy, pending until installed."""
  folder = os.path.join(population_dir, PENDING)
  os.makedirs(folder, exist_ok=True)
  with atomic_write.atomic_open(os.path.join(folder, f'{event["recipient"]}.json')) as f:
    f.write(json.dumps(event))


def installed(population_dir: str, recipient: str, donor_info: dict, values: dict) -> dict:
  """Step 2: a copy installed in `recipient`'s folder, appended to events.jsonl; returns the event.

  The pending decision supplies the scores and time when it names the same
  donor and step; otherwise (a decision from before an interrupt) they come
  from the donor's member.json and the recipient's score is None.
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


def pending_steps(population_dir: str, donor: str) -> List[int]:
  """The donor's env steps that copies decided but not installed name."""
  steps = []
  for path in glob.glob(os.path.join(population_dir, PENDING, '*.json')):
    try:
      with open(path) as f:
        event = json.load(f)
      if event['donor'] == donor:
        steps.append(int(event['env_steps']))
    except (OSError, ValueError, KeyError, TypeError):
      continue
  return steps


def write_values(workdir: str, member: str, values: dict) -> None:
  """Writes a member's current hyperparameters to its folder's pbt_member.json
  (what launch/train.py and a resume from the record take)."""
  with atomic_write.atomic_open(os.path.join(workdir, VALUES)) as f:
    json.dump({'member': member, 'values': values}, f)


def read_values(workdir: str) -> Optional[dict]:
  """{hyperparameter: value} of the member whose folder is `workdir`, or None
  (not a member, or its pbt_member.json unreadable)."""
  try:
    with open(os.path.join(workdir, VALUES)) as f:
      return {k: float(v) for k, v in json.load(f)['values'].items()}
  except (OSError, ValueError, KeyError, TypeError, AttributeError):
    return None


def was_installed(population_dir: str, recipient: str, donor_info: dict) -> bool:
  """Whether events.jsonl records this copy (donor and env step) in `recipient` already."""
  step = int(donor_info['env_steps'])
  return any(e['recipient'] == recipient and e['donor'] == donor_info['member']
             and e['env_steps'] == step for e in read_events(population_dir))


def clear_pending(population_dir: str) -> None:
  """Removes copies.pending/ of a finished population: a decision never installed was no copy."""
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
  """Writes each copy its donor did not record (it finished first, or the
  ledger was unreachable) into the donor's metrics, at its last env step."""
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
  """Writes population.json (atomically) from Ray Tune's results, or with
  `results` None from the members' folders, and events.jsonl; returns it.

  'finished' means every member at total_env_steps and none failed or
  stopped; a member stopped by SIGTERM is listed in 'stopped', not 'failed'.
  """
  events = read_events(population_dir)
  members, failed, stopped = [], [], []
  if results is None:
    folder = os.path.join(population_dir, MEMBERS)
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    results = [None] * len(names)
  for i, result in enumerate(results):
    if result is None:
      name, error = names[i], None
      metrics = {**(read_values(os.path.join(population_dir, MEMBERS, name)) or {}),
                 **_own_progress(population_dir, name)}
    else:
      metrics, name, error = result.metrics or {}, _result_member(result), result.error
      if metrics.get('member') != name:   # the donor's last result, set by Ray at a copy
        metrics = {**metrics, **_own_progress(population_dir, name)}
    row = {'member': name, 'score': metrics.get('score'), 'env_steps': metrics.get('env_steps'),
           'values': {k: metrics.get(k, ((result and result.config) or {}).get(k))
                      for k in settings.ranges},
           'copied_from': [e['donor'] for e in events if e['recipient'] == name],
           'copied_to': [e['recipient'] for e in events if e['donor'] == name],
           'error': None}
    if error is not None:
      lines = [line for line in str(error).splitlines() if line.strip()]
      said = next((line for line in lines if STOPPED in line), None)
      row['error'] = (said[said.find(name):] if said else
                      f'{type(error).__name__}: {lines[0] if lines else ""}'[:500])
      (stopped if said else failed).append(name)
    members.append(row)
  members.sort(key=lambda r: r['member'])
  scores = [r['score'] for r in members if r['score'] is not None and r['error'] is None]
  finished = bool(members) and not failed and not stopped and all(
      (r['env_steps'] or 0) >= total_env_steps for r in members)
  summary = {'members': members, 'copies': len(events), 'failed': failed, 'stopped': stopped,
             'best_score': max(scores) if scores else None, 'score_kind': settings.score_kind
             if settings.metric == 'auto' else settings.metric, 'finished': finished}
  with atomic_write.atomic_open(os.path.join(population_dir, SUMMARY)) as f:
    json.dump(summary, f, indent=1)
  return summary


def _result_member(result) -> str:
  """The member a Ray Tune result is of, from its trial folder's name: after a
  copy Ray gives a trial the donor's last result, so its metrics may name the donor."""
  found = re.match(r'[^_]+_([0-9a-f]+_\d+)_', os.path.basename(os.path.normpath(result.path)))
  if found:
    return member_name(found.group(1))
  return member_name(str((result.metrics or {}).get('trial_id', '')))


def _own_progress(population_dir: str, name: str) -> dict:
  """{'score', 'env_steps'} of a member's last PBT interval from its metrics.jsonl, or {}."""
  path = os.path.join(population_dir, MEMBERS, name, 'metrics.jsonl')
  try:
    rows = [r for r in run_folder.read_jsonl(path) if 'pbt/score' in r]
  except OSError:
    return {}
  return {'score': rows[-1]['pbt/score'], 'env_steps': rows[-1]['env_steps']} if rows else {}


def finished_at(population_dir: str, total_env_steps: int) -> Optional[dict]:
  """The summary of a population finished at total_env_steps, else None (also
  when population.json is unreadable: the population is resumed)."""
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
  """{config field: value} a population keeps from its first driver:
  total_env_steps and the pbt group as Ray Tune holds them."""
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
  """Writes `fixed` to population_settings.json atomically; RunFolderError if it cannot."""
  path = os.path.join(population_dir, SETTINGS)
  try:
    with atomic_write.atomic_open(path) as f:
      json.dump(fixed, f, indent=1)
  except OSError as e:
    raise run_folder.RunFolderError(f'cannot write {path}: {e.strerror or e}') from None


def changed_settings(population_dir: str, fixed: dict) -> List[tuple]:
  """(field, started with, now) for each field of `fixed` that differs ([]
  without population_settings.json); RunFolderError if it is unreadable."""
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
  """Raises RunFolderError naming each field of `fixed` that differs from what
  the population started with."""
  changed = changed_settings(population_dir, fixed)
  if changed:
    raise run_folder.RunFolderError(
        f'cannot resume {population_dir} with different population settings: '
        + '; '.join(f'{field} {json.dumps(now)} (it started with {json.dumps(saved)})'
                    for field, saved, now in changed)
        + f' ({SETTINGS}). Ray Tune restores the members, the scheduler and the stop rule it '
        'started with, so these would be ignored: undo these overrides, or start a new '
        'population in another --config.workdir')


def resume_values(population_dir: str, starts: List[dict]):
  """The members' start values for a population resumed from its own record:
  each member's current hyperparameters (pbt_member.json), else its start;
  and how many copies decided but not installed were dropped (their Ray
  checkpoints went with Ray's state)."""
  values = [read_values(os.path.join(population_dir, MEMBERS, member_name(f'_{i:05d}')))
            or start for i, start in enumerate(starts)]
  dropped = len(os.listdir(os.path.join(population_dir, PENDING))) if os.path.isdir(
      os.path.join(population_dir, PENDING)) else 0
  clear_pending(population_dir)
  return values, dropped


def stopped_line(population_dir: str, settings, total: int, error: Exception) -> str:
  """The one line of a population Ray Tune ended early, after writing
  population.json from the members' folders (when the disk allows)."""
  lines = [line.strip() for line in str(error).splitlines() if line.strip()]
  line = (f'Ray Tune stopped the population in {population_dir}: {type(error).__name__}'
          f'{": " + lines[-1][:300] if lines else ""}')
  try:
    summarise(None, population_dir, settings, total)
    written = 'population.json says unfinished. Free what ran out and the'
  except OSError as e:
    written = f'population.json could not be written ({e.strerror or e}). The'
  return f'{line}; {written} same command resumes it'
