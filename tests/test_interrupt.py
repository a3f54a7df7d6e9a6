"""Ctrl-C stops a run cleanly and keeps what it wrote."""

import json
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_sigint_stops_cleanly_and_keeps_metrics(tmp_path):
  workdir = tmp_path / 'run'
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  proc = subprocess.Popen(
      [sys.executable, 'launch/train.py', '--config=configs/cartpole.py',
       f'--config.workdir={workdir}', '--config.wandb.mode=disabled',
       '--config.log.every_seconds=0.5', '--config.total_env_steps=100000000'],
      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  metrics = workdir / 'metrics.jsonl'
  deadline = time.time() + 120
  while time.time() < deadline and not (metrics.exists() and metrics.read_text().count('\n') >= 2):
    time.sleep(0.5)
  assert metrics.exists(), 'the run wrote no metrics'
  proc.send_signal(signal.SIGINT)
  out, err = proc.communicate(timeout=60)
  assert proc.returncode == 0, err
  assert 'interrupted at env step' in err
  assert 'Traceback' not in err
  lines = [json.loads(l) for l in metrics.read_text().splitlines()]
  assert len(lines) >= 2 and lines[-1]['env_steps'] > 0
  assert (workdir / 'config.json').exists()
