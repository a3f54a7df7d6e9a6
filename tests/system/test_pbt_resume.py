"""A population that survives its driver and its copies (launch/pbt.py,
rundir/population.py, rundir/population_record.py): a copy installed beside
the member's checkpoints before any of them moves, a restore that keeps
newer ones, a copy not installed twice, a summary that names each member
by its trial, and a CartPole population stopped by SIGTERM, SIGINT and
SIGKILL that resumes to the end with each copy recorded once."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from configs import cartpole, pbt as pbt_lib
from configs.validation import validate
from rundir.run_folder import read_jsonl as _read_jsonl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _config(tmp_path):
  c = cartpole.get_config()
  c.num_learner_devices = 1
  c.wandb.mode = 'disabled'
  c.pbt.adapt = ('learning_rate',)
  c.workdir = str(tmp_path)
  return c


def _fake_checkpoint(step_dir, metadata):
  """A checkpoint folder with orbax's metadata file and its manifest (intact)."""
  from agents import checkpoint
  (step_dir / 'default').mkdir(parents=True)
  (step_dir / 'default' / '_METADATA').write_text(metadata)
  checkpoint.write_manifest(str(step_dir))


def test_installed_checkpoint_replaces_newer_ones(tmp_path):
  """A copied checkpoint becomes the newest of the member's folder: its
  own newer ones (and a different one at the same step) move aside."""
  from rundir import population as pbt
  member = tmp_path / 'member'
  for step in (100, 200, 300):
    _fake_checkpoint(member / 'checkpoints' / str(step), '{}')
  donor = tmp_path / 'donor_state'
  _fake_checkpoint(donor, '{"donor": 1}')
  pbt.install_checkpoint(str(donor), str(member), 200, own=False)
  assert sorted(os.listdir(member / 'checkpoints')) == ['100', '200']
  assert (member / 'checkpoints' / '200' / 'default' / '_METADATA').read_text() == '{"donor": 1}'
  assert len(os.listdir(member / pbt.REPLACED)) == 2   # its own 200 and 300
  pbt.install_checkpoint(str(donor), str(member), 200, own=True)  # its own, intact: kept
  assert len(os.listdir(member / pbt.REPLACED)) == 2
  # A restore of its own older checkpoint (Ray Tune's last, on a resume)
  # keeps the member's newer one: it goes on from its newest.
  _fake_checkpoint(member / 'checkpoints' / '300', '{"own": 300}')
  pbt.install_checkpoint(str(donor), str(member), 100, own=True)
  assert sorted(os.listdir(member / 'checkpoints')) == ['100', '200', '300']
  assert len(os.listdir(member / pbt.REPLACED)) == 2


def test_a_copy_recorded_as_installed_is_not_installed_again(tmp_path):
  """Ray Tune restores a trial from its last Ray checkpoint, which after a
  copy is the donor's: on a resume the copy must not be installed (and
  recorded) again over what the member trained since."""
  from rundir import population_record as record
  (tmp_path / record.EVENTS).write_text(json.dumps(
      {'time': None, 'donor': 'member_00000', 'recipient': 'member_00001', 'env_steps': 4160,
       'donor_score': 1.0, 'recipient_score': None, 'new_values': {}, 'installed': 'x'}) + '\n')
  info = {'member': 'member_00000', 'env_steps': 4160, 'score': 1.0}
  assert record.was_installed(str(tmp_path), 'member_00001', info)
  assert not record.was_installed(str(tmp_path), 'member_00001', {**info, 'env_steps': 8160})
  assert not record.was_installed(str(tmp_path), 'member_00002', info)


def test_the_summary_names_each_member_by_its_trial_not_its_copied_result(tmp_path):
  """After a copy Ray gives the recipient the donor's last result; the
  summary names the member by its trial folder and reads its own progress."""
  from types import SimpleNamespace
  from rundir import population_record as record
  c = _config(tmp_path)
  settings = pbt_lib.check(c, validate(c))
  own = tmp_path / record.MEMBERS / 'member_00001'
  own.mkdir(parents=True)
  (own / 'metrics.jsonl').write_text(json.dumps({'env_steps': 8000, 'pbt/score': 3.0}) + '\n')
  donor_metrics = {'member': 'member_00000', 'score': 9.0, 'env_steps': 4000,
                   'trial_id': '9b6e2_00000', 'learning_rate': 1e-4}
  results = [SimpleNamespace(path=str(tmp_path / f'Member_9b6e2_0000{i}_{i}_2026-11-28_15-58-52'),
                             metrics=donor_metrics, config={}, error=None) for i in (0, 1)]
  summary = record.summarise(results, str(tmp_path), settings, 8000)
  assert [(m['member'], m['score'], m['env_steps']) for m in summary['members']] == [
      ('member_00000', 9.0, 4000), ('member_00001', 3.0, 8000)]


def test_a_resume_names_each_population_setting_that_changed(tmp_path):
  """What Ray Tune restores from the first driver (the total, the pbt
  group) is recorded; a resume's differences are named with both values."""
  from rundir import population_record as record
  from rundir.run_folder import RunFolderError
  c = _config(tmp_path)
  settings = pbt_lib.check(c, validate(c))
  fixed = record.fixed_settings(settings, c.total_env_steps)
  assert record.changed_settings(str(tmp_path), fixed) == []   # none recorded: nothing to check
  record.write_settings(str(tmp_path), fixed)
  assert record.changed_settings(str(tmp_path), fixed) == []
  c.pbt.quantile = 0.5
  c.pbt.ranges = {**c.pbt.ranges, 'learning_rate': (1e-4, 1e-2)}
  changed = record.changed_settings(
      str(tmp_path), record.fixed_settings(pbt_lib.check(c, validate(c), 2), 2 * c.total_env_steps))
  assert changed == [
      ('total_env_steps', c.total_env_steps, 2 * c.total_env_steps),
      ('pbt.population', settings.population, 2),
      ('pbt.ranges', {'learning_rate': [1e-5, 1e-2]}, {'learning_rate': [1e-4, 1e-2]}),
      ('pbt.quantile', 0.25, 0.5)]
  with pytest.raises(RunFolderError, match=r'with different population settings: total_env_steps '
                     rf'{2 * c.total_env_steps} \(it started with {c.total_env_steps}\) '
                     r'\(population_settings.json\)\. Ray Tune restores'):
    record.check_unchanged(str(tmp_path), record.fixed_settings(settings, 2 * c.total_env_steps))
  record.check_unchanged(str(tmp_path), fixed)   # unchanged: no error
  (tmp_path / record.SETTINGS).write_text('{"total')
  with pytest.raises(RunFolderError, match='population_settings.json .*cannot be checked'):
    record.changed_settings(str(tmp_path), fixed)


def _pbt_command(workdir, total):
  return [sys.executable, 'launch/pbt.py', '--config=configs/cartpole.py', '--population=2',
          f'--config.workdir={workdir}', '--config.num_learner_devices=1',
          '--config.wandb.mode=disabled', '--config.log.every_seconds=1.0',
          "--config.pbt.adapt=('learning_rate',)", '--config.pbt.interval_env_steps=4000',
          '--config.pbt.cpus_per_member=1', f'--config.total_env_steps={total}']


# Room for three stops: after a stop is asked, members train on until Ray
# ends them, two intervals or more on a fast machine (CI's ran a 24,000-step
# population to its end during the SIGINT stop, and the SIGKILL stage found
# nothing left to train).
TOTAL = 48_000


def _checkpoints(member):
  root = member / 'checkpoints'
  return sorted(int(n) for n in os.listdir(root) if n.isdigit()) if root.is_dir() else []


def _resume_then_stop(command, pop, sig):
  """Resumes the population, lets a member write a checkpoint, then stops the
  driver with `sig`: SIGINT (Ctrl-C) is a clean stop (exit 0, population.json
  unfinished); after SIGKILL no code of the driver runs, and its run.lock is
  stale for the next driver to take over. Either way, within 15 s no
  process it started is left (infra/orphan_watchdog.py ends Ray's)."""
  from infra import orphan_watchdog
  members = sorted((pop / 'members').glob('member_*'))
  before = {m: max(_checkpoints(m), default=0) for m in members}
  assert all(v < TOTAL for v in before.values()), (
      f'the members ran to the end during the last stop ({before}): raise TOTAL')
  driver = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
  try:
    deadline = time.time() + 300
    while not any(max(_checkpoints(m), default=0) > before[m] for m in members):
      if time.time() > deadline or driver.poll() is not None:
        err = '' if driver.poll() is None else driver.communicate()[1]
        raise AssertionError(
            f'the resumed members never saved: checkpoints before {before}, now '
            f'{ {m.name: _checkpoints(m) for m in members} }, exit {driver.poll()}\n{err[-3000:]}')
      time.sleep(0.5)
    print(f'{signal.Signals(sig).name} stage: checkpoints before { {m.name: v for m, v in before.items()} }, '
          f'at the stop { {m.name: _checkpoints(m) for m in members} }')
    started = orphan_watchdog.descendants(driver.pid)
    assert started, 'the driver started no process'
    driver.send_signal(sig)
    _, err = driver.communicate(timeout=180)
  finally:
    if driver.poll() is None:
      driver.kill()
      driver.wait(timeout=60)
  if sig == signal.SIGINT:
    assert driver.returncode == 0 and 'Traceback' not in err, err[-3000:]
    assert json.loads((pop / 'population.json').read_text())['finished'] is False
  _assert_none_left(started, f'the driver stopped by {signal.Signals(sig).name}')
  print(f'after the {signal.Signals(sig).name} stop: { {m.name: _checkpoints(m) for m in members} }')


def _assert_none_left(started, whose, seconds=15):
  """Within `seconds`, none of `started` ({pid: start time}, from
  orphan_watchdog.descendants) is still running."""

  def left():
    alive = []
    for pid, start in started.items():
      try:
        with open(f'/proc/{pid}/stat') as f:
          fields = f.read().rsplit(')', 1)[1].split()
      except OSError:
        continue
      if fields[0] != 'Z' and int(fields[19]) == start:   # not a zombie, not a reused pid
        alive.append(pid)
    return alive
  deadline = time.time() + seconds
  while left() and time.time() < deadline:
    time.sleep(0.5)
  assert not left(), f'processes {whose} started are still running: {left()}'


@pytest.mark.slow  # the full suite only, not the CI tier (docs/testing.md): four Ray populations in turn, 10-12 min
@pytest.mark.xdist_group('processes')  # Ray: one cluster at a time
@pytest.mark.timeout(1800)  # a hang guard: four drivers in turn, slow beside other work
def test_a_population_stopped_by_sigterm_resumes_and_records_only_installed_copies(tmp_path):
  """SIGTERM to the driver once a member is past its second interval: a
  clean stop (exit 0, one line of ours, population.json unfinished); a
  second driver meanwhile is refused in one line; every copy in
  events.jsonl is installed in its recipient's folder; the same command
  resumes, is stopped by SIGINT (Ctrl-C) as cleanly, resumes again and is
  killed with SIGKILL (after each stop its Ray processes are gone within
  15 s), then resumes every member to the end with each copy recorded
  once, and once more says it is finished; a longer total or another
  population size is refused in one line.
  Before: Ray's SIGTERM dump and exit 1 with no population.json, a resume
  that failed in Tuner.restore, a finished population likewise."""
  from infra import orphan_watchdog
  pop = tmp_path / 'pop'
  command = _pbt_command(pop, TOTAL)
  driver = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
  try:
    deadline = time.time() + 480   # Ray and two members start on a loaded machine
    while not any(len(_checkpoints(m)) >= 2 for m in (pop / 'members').glob('member_*')):
      assert time.time() < deadline and driver.poll() is None, 'no member reached 8,000 steps'
      time.sleep(0.5)
    second = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert second.returncode == 2, second.stderr[-2000:]
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f'error: {pop} is in use by another trainer (host '), second.stderr[-2000:]
    started = orphan_watchdog.descendants(driver.pid)
    driver.send_signal(signal.SIGTERM)
    out, err = driver.communicate(timeout=180)
  finally:
    if driver.poll() is None:
      driver.kill()
  assert driver.returncode == 0, err[-3000:]
  _assert_none_left(started, 'the driver stopped by SIGTERM')
  assert 'SIGTERM received' not in err
  assert ('stopped before total_env_steps; population.json says unfinished. The same command '
          'resumes it') in err
  summary = json.loads((pop / 'population.json').read_text())
  assert summary['finished'] is False
  assert not (pop / 'run.lock').exists()

  def installed_copies_are_in_their_recipients():
    events = _read_jsonl(pop / 'events.jsonl') if (pop / 'events.jsonl').exists() else []
    for e in events:
      rows = _read_jsonl(pop / 'members' / e['recipient'] / 'metrics.jsonl')
      assert any(r.get('pbt/copied_from') == e['donor'] and r['env_steps'] == e['env_steps']
                 for r in rows), e
    return events

  installed_copies_are_in_their_recipients()
  _resume_then_stop(command, pop, signal.SIGINT)
  installed_copies_are_in_their_recipients()
  _resume_then_stop(command, pop, signal.SIGKILL)
  done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  assert 'resuming the population in' in done.stdout
  summary = json.loads((pop / 'population.json').read_text())
  assert summary['finished'] is True and summary['failed'] == []
  assert [m['env_steps'] for m in summary['members']] == [TOTAL, TOTAL]
  events = installed_copies_are_in_their_recipients()
  assert summary['copies'] == len(events)
  # Each copy once: a resume does not install (or record) a copy again.
  copies = [(e['donor'], e['recipient'], e['env_steps']) for e in events]
  assert len(set(copies)) == len(copies), events
  assert [m['member'] for m in summary['members']] == ['member_00000', 'member_00001']
  again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert again.returncode == 0 and again.stderr.strip().splitlines() == [
      f'{pop} already finished: every member at {TOTAL:,} env steps (population.json); nothing to '
      'do. A population keeps its total: to train longer, start a new one in another '
      '--config.workdir'], again.stderr[-2000:]
  # A longer total or a third member would be ignored by Ray Tune's restore
  # (before: the driver ran, trained nothing and said "unfinished").
  longer = subprocess.run(command[:-1] + [f'--config.total_env_steps={TOTAL + 8000}',
                                           '--population=3'],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert longer.returncode == 2 and longer.stderr.strip().splitlines() == [
      f'error: cannot resume {pop} with different population settings: total_env_steps '
      f'{TOTAL + 8000} (it started with {TOTAL}); pbt.population 3 (it started with 2) '
      '(population_settings.json). Ray Tune restores the members, the scheduler and the stop rule '
      'it started with, so these would be ignored: undo these overrides, or start a new '
      'population in another --config.workdir'], longer.stderr[-2000:]


def test_a_copy_that_fails_leaves_the_members_own_checkpoints(tmp_path, monkeypatch):
  """A full disk half-way through a copy: before, the member's newest
  checkpoint had already moved to checkpoints.replaced/ and the copy was
  left as <step>.copying; now the member's folder is as it was."""
  import errno
  import shutil
  from rundir import population as pbt
  member = tmp_path / 'member'
  for step in (100, 200):
    (member / 'checkpoints' / str(step) / 'default').mkdir(parents=True)
    (member / 'checkpoints' / str(step) / 'default' / '_METADATA').write_text(f'{{"own": {step}}}')
  donor = tmp_path / 'donor_state'
  (donor / 'default').mkdir(parents=True)
  (donor / 'default' / '_METADATA').write_text('{"donor": 1}')
  real_copytree = shutil.copytree

  def full_disk(src, dst, **kwargs):
    os.makedirs(os.path.join(dst, 'default'))
    with open(os.path.join(dst, 'default', 'part'), 'w') as f:
      f.write('half')
    raise OSError(errno.ENOSPC, 'No space left on device')

  monkeypatch.setattr(shutil, 'copytree', full_disk)
  with pytest.raises(OSError, match='No space left'):
    pbt.install_checkpoint(str(donor), str(member), 200, own=False)
  assert sorted(os.listdir(member / 'checkpoints')) == ['100', '200']
  assert (member / 'checkpoints' / '200' / 'default' / '_METADATA').read_text() == '{"own": 200}'
  assert not (member / pbt.REPLACED).exists()
  monkeypatch.setattr(shutil, 'copytree', real_copytree)   # the disk has room again
  pbt.install_checkpoint(str(donor), str(member), 200, own=False)
  assert sorted(os.listdir(member / 'checkpoints')) == ['100', '200']
  assert (member / 'checkpoints' / '200' / 'default' / '_METADATA').read_text() == '{"donor": 1}'
  assert len(os.listdir(member / pbt.REPLACED)) == 1
