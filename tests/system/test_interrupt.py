"""Ctrl-C and SIGTERM stop a run cleanly, keep what it wrote and save a
final checkpoint that the same command resumes from."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _start(workdir, total_env_steps=100_000_000):
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  # Started as a shell's background job would be: SIGINT ignored (`trap ""`,
  # inherited through exec). train.py must still stop on it.
  return subprocess.Popen(
      ['sh', '-c', 'trap "" INT; exec "$0" "$@"', sys.executable, 'launch/train.py',
       '--config=configs/cartpole.py',
       f'--config.workdir={workdir}', '--config.wandb.mode=disabled',
       '--config.log.every_seconds=0.5', f'--config.total_env_steps={total_env_steps}'],
      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_cleanly_keeps_metrics_and_checkpoints(tmp_path, sig):
  workdir = tmp_path / 'run'
  proc = _start(workdir)
  metrics = workdir / 'metrics.jsonl'
  try:  # a run left training would take the cores from every later test
    deadline = time.time() + 240
    while time.time() < deadline and not (metrics.exists()
                                          and metrics.read_text().count('\n') >= 2):
      time.sleep(0.5)
    assert metrics.exists(), 'the run wrote no metrics'
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=180)  # generous: CI machines may be loaded
  except BaseException:
    proc.kill()
    raise
  assert proc.returncode == 0, err
  assert 'interrupted at env step' in err
  assert 'Traceback' not in err
  lines = [json.loads(l) for l in metrics.read_text().splitlines()]
  assert len(lines) >= 2 and lines[-1]['env_steps'] > 0
  assert (workdir / 'config.json').exists()
  checkpoints = sorted(int(p.name) for p in (workdir / 'checkpoints').iterdir()
                       if p.name.isdigit())
  assert checkpoints, 'no final checkpoint'
  assert checkpoints[-1] >= lines[-1]['env_steps']
  if sig == signal.SIGTERM:
    # The same command goes on from there, appending to the metrics.
    proc = _start(workdir, total_env_steps=checkpoints[-1] + 2000)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert f'resuming from the checkpoint at env step {checkpoints[-1]:,}' in err
    more = [json.loads(l) for l in metrics.read_text().splitlines()]
    assert len(more) > len(lines)
    assert more[len(lines)]['env_steps'] > checkpoints[-1]
