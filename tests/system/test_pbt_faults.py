"""A population's faults at the edges ([28]), each on a real CartPole
population of 2 driven by launch/pbt.py: SIGTERM to one member's process,
Ray Tune's state cut off, a kill -9 of the driver the moment a copy is
decided, and a disk that fills when a copy is decided."""

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from rundir import population_record as record

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INTERVAL = 4000


def _command(workdir, total, *extra):
  return [sys.executable, 'launch/pbt.py', '--config=configs/cartpole.py', '--population=2',
          f'--config.workdir={workdir}', '--config.num_learner_devices=1',
          '--config.wandb.mode=disabled', '--config.log.every_seconds=1.0',
          "--config.pbt.adapt=('learning_rate',)", f'--config.pbt.interval_env_steps={INTERVAL}',
          '--config.pbt.cpus_per_member=1', f'--config.total_env_steps={total}', *extra]


def _wait(condition, what, driver=None, seconds=480):
  deadline = time.time() + seconds
  while not condition():
    if time.time() > deadline or (driver is not None and driver.poll() is not None):
      ended = driver is not None and driver.poll() is not None
      err = driver.communicate()[1][-3000:] if ended else ''
      raise AssertionError(f'{what} never happened (exit {driver and driver.poll()})\n{err}')
    time.sleep(0.2)


def _rows(member):
  return record.run_folder.read_jsonl(str(member / 'metrics.jsonl'))


def _rates(member):
  """The learning rate of each interval row of a member, in order ([] before its first)."""
  if not (member / 'metrics.jsonl').exists():
    return []
  return [r['pbt/learning_rate'] for r in _rows(member) if 'pbt/score' in r]


def _finish(command, pop, total):
  done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
  assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
  summary = json.loads((pop / record.SUMMARY).read_text())
  assert summary['finished'] is True and summary['failed'] == [] and summary['stopped'] == []
  assert [m['env_steps'] for m in summary['members']] == [total, total]
  return done


def _saved(member):
  """The env steps of a member's checkpoints."""
  root = member / 'checkpoints'
  return [int(n) for n in os.listdir(root) if n.isdigit()] if root.is_dir() else []


def _member_pid(member):
  try:
    return int(json.loads((member / 'run.lock').read_text())['pid'])
  except (OSError, ValueError, KeyError):
    return None


@pytest.mark.slow  # the full suite only: two Ray populations in turn, 4-8 min on 2 cores
@pytest.mark.xdist_group('processes')  # Ray: one cluster at a time
@pytest.mark.timeout(1800)
def test_sigterm_to_a_member_stops_it_cleanly_and_the_same_command_resumes_it(tmp_path):
  """SIGTERM to member_00001's process once it has a checkpoint: it saves
  at the signal and stops; the other member finishes; the driver names it
  in one line, exit 0, population.json unfinished with it under 'stopped'.
  The same command resumes it with its own learning rate. Before: an
  ActorDiedError (no checkpoint at the signal), a failed member the same
  pbt.py never resumed."""
  total = 16_000
  pop = tmp_path / 'pop'
  command = _command(pop, total)
  victim = pop / 'members' / 'member_00001'
  driver = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
  try:
    _wait(lambda: _saved(victim) and _member_pid(victim), 'a member checkpoint', driver)
    os.kill(_member_pid(victim), signal.SIGTERM)
    out, err = driver.communicate(timeout=600)
  finally:
    if driver.poll() is None:
      driver.kill()
  assert driver.returncode == 0, err[-3000:]
  summary = json.loads((pop / record.SUMMARY).read_text())
  assert summary['stopped'] == ['member_00001'] and summary['failed'] == []
  assert summary['finished'] is False
  said = [line for line in err.splitlines() if 'stopped by SIGTERM' in line]
  assert said and said[-1].startswith('member_00001 stopped by SIGTERM at env step'), err[-3000:]
  step = max(r['env_steps'] for r in _rows(victim))
  saved = max(_saved(victim))
  assert saved == step and step < total   # saved at the signal, mid-interval
  own = record.read_values(str(victim))['learning_rate']
  done = _finish(command, pop, total)
  assert 'resuming the population in' in done.stdout
  copies = [e for e in record.read_events(str(pop)) if e['recipient'] == 'member_00001']
  if not copies:   # its own rate went on (a copy would change it)
    assert set(_rates(victim)) == {own}, (own, _rates(victim))


@pytest.mark.slow  # the full suite only: a Ray population stopped and resumed, 3-6 min on 2 cores
@pytest.mark.xdist_group('processes')
@pytest.mark.timeout(1800)
def test_a_population_whose_ray_state_is_cut_off_resumes_from_its_own_record(tmp_path):
  """Ray Tune's experiment state cut off (as a full disk leaves it): the same
  command sets it aside, says so, and resumes both members from their
  folders with their own learning rates. Before: a new experiment of one
  trial over the old folders, member_00000 with a freshly drawn rate and
  member_00001 left unfinished, population.json 'finished'."""
  total = 16_000
  pop = tmp_path / 'pop'
  command = _command(pop, total)
  driver = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
  members = [pop / 'members' / f'member_0000{i}' for i in (0, 1)]
  try:
    _wait(lambda: all(m.is_dir() and len(_rates(m)) >= 1 for m in members), 'an interval each',
          driver)
    driver.send_signal(signal.SIGINT)
    driver.communicate(timeout=300)
  finally:
    if driver.poll() is None:
      driver.kill()
  before = {m.name: _rates(m) for m in members}
  for state in glob.glob(str(pop / 'ray' / 'tune' / 'experiment_state-*.json')):
    with open(state, 'r+') as f:
      f.truncate(40)
  done = _finish(command, pop, total)
  assert 'cannot be restored (it is cut off (JSONDecodeError reading it)); moved to' in done.stdout
  assert 'resuming the population from its own record' in done.stdout
  events = record.read_events(str(pop))
  for m in members:
    after = _rates(m)
    copied = [e for e in events if e['recipient'] == m.name]
    # its own rate went on (unless a copy after the resume changed it)
    assert after[:len(before[m.name])] == before[m.name]
    if not copied:
      assert set(after) == {before[m.name][-1]}, (m.name, before, after)


@pytest.mark.slow  # the full suite only: a Ray population killed and resumed, 3-6 min on 2 cores
@pytest.mark.xdist_group('processes')
@pytest.mark.timeout(1800)
def test_kill_9_when_a_copy_is_decided_then_the_same_command_finishes(tmp_path):
  """kill -9 of the driver the moment copies.pending/ appears: the same
  command finishes every member, none failed, each copy recorded once.
  Before: Ray kept 2 checkpoints per trial, and a resume could restore the
  recipient from one Ray had deleted ('Could not recover from checkpoint
  as it does not exist on storage anymore'); whether it does depends on
  Ray's timing, so this holds the outcome, and test_population_faults.py
  the retention."""
  total = 32_000
  pop = tmp_path / 'pop'
  # The bottom half copies the top half: a copy at most intervals.
  command = _command(pop, total, '--config.pbt.quantile=0.5')
  driver = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
  try:
    _wait(lambda: glob.glob(str(pop / record.PENDING / '*.json')), 'a copy decision', driver,
          seconds=900)
    driver.send_signal(signal.SIGKILL)
    driver.wait(timeout=60)
  finally:
    if driver.poll() is None:
      driver.kill()
  time.sleep(5)   # the watchdog ends Ray's processes
  _finish(command, pop, total)
  copies = [(e['donor'], e['recipient'], e['env_steps']) for e in record.read_events(str(pop))]
  assert len(set(copies)) == len(copies), copies


@pytest.fixture
def small_disk(tmp_path):
  """A 24 MB tmpfs (root only: skipped elsewhere)."""
  mount = tmp_path / 'disk'
  mount.mkdir()
  made = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=24m', 'tmpfs', str(mount)],
                        capture_output=True, check=False)
  if made.returncode != 0:
    pytest.skip('cannot mount a small tmpfs here (not root)')
  try:
    yield mount
  finally:
    subprocess.run(['umount', '-l', str(mount)], check=False)


@pytest.mark.slow  # the full suite only: a Ray population on a full disk and resumed, 3-6 min
@pytest.mark.xdist_group('processes')
@pytest.mark.timeout(1800)
def test_a_disk_that_fills_at_a_copy_ends_in_one_line_and_the_population_resumes(small_disk):
  """The population's disk fills when a copy is decided: the driver ends
  in one line (exit 1) and population.json, when it fits, says unfinished;
  with space freed, the same command finishes both members, neither with a
  freshly drawn rate. Before: Ray's 'EOFError: Ran out of input' traceback,
  no population.json, then a new experiment of one trial."""
  total = 32_000
  pop = small_disk / 'pop'
  command = _command(pop, total, '--config.pbt.quantile=0.5')
  driver = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
  filler = small_disk / 'filler'
  try:
    _wait(lambda: glob.glob(str(pop / record.PENDING / '*.json')), 'a copy decision', driver,
          seconds=900)
    with open(filler, 'wb') as f:   # every byte left
      try:
        while True:
          f.write(b'\0' * (1 << 16))
          f.flush()
      except OSError:
        pass
    out, err = driver.communicate(timeout=600)
  finally:
    if driver.poll() is None:
      driver.kill()
      driver.wait()
  starts = {m: _rates(pop / 'members' / m)[:1] for m in ('member_00000', 'member_00001')}
  if driver.returncode == 0:   # the members finished before the disk mattered
    pytest.skip('the population finished on the full disk; nothing to test')
  errors = [line for line in err.splitlines() if line.startswith('error: ')]
  assert driver.returncode == 1 and len(errors) == 1 and 'Traceback' not in err.split(
      errors[0])[-1], err[-3000:]
  assert errors[0].startswith(f'error: Ray Tune stopped the population in {pop}'), errors
  filler.unlink()
  time.sleep(5)
  _finish(command, pop, total)
  for m, first in starts.items():   # each member's first rate is its own start, not a new draw
    assert _rates(pop / 'members' / m)[:1] == first
  shutil.rmtree(pop, ignore_errors=True)
