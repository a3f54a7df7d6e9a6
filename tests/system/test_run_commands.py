"""A run folder nothing can spoil, as faults done to the command a user runs
(launch/train.py on CartPole): two trainers on one folder, an early SIGINT
from a background job, kill -9 then resume, a killed wandb-core. In-process
faults: test_run_faults.py."""

import os
import signal
import subprocess
import sys
import time

import pytest

from agents import checkpoint
from rundir import run_folder
from tests.support.training_runs import read_records as _records

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _command(workdir, *overrides):
  return [sys.executable, 'launch/train.py', '--config=configs/cartpole.py',
          f'--config.workdir={workdir}', '--config.wandb.mode=disabled',
          '--config.log.every_seconds=0.5', '--config.log.progress=False', *overrides]


def _env():
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)  # one CPU device: faster start
  # A wandb run earlier in this pytest process leaves its service's address
  # here; a run given it would use that service instead of starting its own.
  env.pop('WANDB_SERVICE', None)
  return env


def _wait_for(predicate, timeout=240.0, what='the run'):   # start-up on a loaded 2-core machine
  deadline = time.time() + timeout
  while time.time() < deadline:
    if predicate():
      return
    time.sleep(0.25)
  raise AssertionError(f'timed out waiting for {what}')


def _metric_rows(path):
  return path.exists() and path.read_text().count('\n')


@pytest.mark.slow  # the full suite only, not the CI tier (docs/testing.md): two trainers, 1-1.5 min
def test_two_trainers_on_one_workdir_the_second_stops_naming_the_first(tmp_path):
  run = tmp_path / 'run'
  first = subprocess.Popen(_command(run, '--config.total_env_steps=100000000'), cwd=ROOT,
                           env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  try:
    _wait_for(lambda: (run / run_folder.LOCK_FILE).exists(), what='the lock')
    second = subprocess.run(_command(run), cwd=ROOT, env=_env(), capture_output=True, text=True,
                            timeout=120)
    assert second.returncode == 2
    assert second.stderr.strip().splitlines()[-1].startswith(
        f'error: {run} is in use by another trainer (host ')
    assert f'pid {first.pid}' in second.stderr and 'Traceback' not in second.stderr
  finally:
    first.send_signal(signal.SIGTERM)
    _, err = first.communicate(timeout=180)
  assert first.returncode == 0, err
  assert not (run / run_folder.LOCK_FILE).exists()  # released at exit


@pytest.mark.parametrize('when', ['at start', pytest.param('after the run folder', marks=pytest.mark.slow)])
def test_an_early_sigint_from_a_background_job_stops_cleanly(tmp_path, when):
  run = tmp_path / 'run'
  # As a script's `train.py ... &` starts it: SIGINT ignored, inherited.
  proc = subprocess.Popen(['sh', '-c', 'trap "" INT; exec "$0" "$@"', *_command(run)], cwd=ROOT,
                          env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  try:  # a run left training would take the cores from every later test
    if when == 'at start':
      time.sleep(1.0)  # imports under way
    else:
      _wait_for(lambda: (run / 'config.json').exists(), what='the run folder')
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)
  except BaseException:
    proc.kill()
    raise
  assert proc.returncode == 0, err
  assert 'Traceback' not in err
  last = err.strip().splitlines()[-1]
  saved = checkpoint.steps_on_disk(str(run))
  if saved:  # the first update had begun: it ends, is saved, and the line says where
    assert last.startswith(f'interrupted at env step {saved[-1]:,}; the checkpoint at env step '
                           f'{saved[-1]:,} is in')
  else:
    assert last.startswith('stopped') and 'nothing' in last and 'checkpoint' not in last.split(
        ';')[0]


def test_kill_9_then_resume_keeps_metrics_monotone_and_takes_over_the_lock(tmp_path):
  run = tmp_path / 'run'
  metrics = run / 'metrics.jsonl'
  proc = subprocess.Popen(_command(run, '--config.total_env_steps=100000000',
                                   '--config.checkpoint_every_steps=20000'),
                          cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

  def logged_past_a_checkpoint():
    saved = checkpoint.steps_on_disk(str(run))
    return bool(saved) and _metric_rows(metrics) and any(
        r['env_steps'] > saved[-1] for r in _records(metrics))

  try:
    _wait_for(logged_past_a_checkpoint, timeout=180, what='a row past a checkpoint')
  finally:
    proc.kill()  # kill -9: no handler, no save, the lock file left behind
    proc.wait()
  saved = checkpoint.steps_on_disk(str(run))[-1]
  before = _records(metrics)
  assert (run / run_folder.LOCK_FILE).exists()
  done = subprocess.run(_command(run, f'--config.total_env_steps={saved + 3000}',
                                 '--config.checkpoint_every_steps=20000'),
                        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=180)
  assert done.returncode == 0, done.stderr
  assert f'took over the lock left by a stopped trainer (host ' in done.stderr
  assert f'moved to {run}/metrics.after-{saved}.jsonl' in done.stderr
  steps = [r['env_steps'] for r in _records(metrics)]
  assert steps == sorted(steps) and len(set(steps)) == len(steps)
  assert steps[-1] >= saved + 3000
  side = _records(run / f'metrics.after-{saved}.jsonl')
  assert side and all(r['env_steps'] > saved for r in side)
  assert len(side) == len([r for r in before if r['env_steps'] > saved])
  from analysis import run_metrics
  loaded = run_metrics.load_metrics(str(run))
  assert [r['env_steps'] for r in loaded.records] == steps  # one run, as written


def _children_named(pid, name):
  out = []
  for entry in os.listdir('/proc'):
    if not entry.isdigit():
      continue
    try:
      with open(f'/proc/{entry}/stat') as f:
        ppid = int(f.read().rsplit(')', 1)[1].split()[1])
      with open(f'/proc/{entry}/cmdline', 'rb') as f:
        cmdline = f.read()
    except OSError:
      continue
    if ppid == pid and name.encode() in cmdline:
      out.append(int(entry))
  return out


def test_a_dead_wandb_core_is_a_warning_and_the_run_goes_on(tmp_path):
  run = tmp_path / 'run'
  metrics = run / 'metrics.jsonl'
  cmd = [a for a in _command(run, '--config.total_env_steps=100000000')
         if a != '--config.wandb.mode=disabled'] + ['--config.wandb.mode=offline']
  proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
  try:
    _wait_for(lambda: _metric_rows(metrics) >= 1 and _children_named(proc.pid, 'wandb-core'),
              timeout=180, what='wandb and the first metrics')
    for child in _children_named(proc.pid, 'wandb-core'):
      os.kill(child, signal.SIGKILL)
    rows = _metric_rows(metrics)
    _wait_for(lambda: _metric_rows(metrics) >= rows + 3, what='metrics after wandb died')
  finally:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=180)
  assert proc.returncode == 0, err
  assert 'Traceback' not in err
  assert err.count('warning: wandb failed while logging env step') == 1
  assert err.strip().splitlines()[-1].startswith('interrupted at env step')
  assert (run / 'wandb_failed.txt').exists()
