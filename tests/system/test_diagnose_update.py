"""launch/diagnose_update.py end to end on CartPole: the config's actors
collect unrolls, its learner's update is measured at the start and after
each of two training updates, and the JSON holds every point."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_diagnose_update_measures_the_start_and_every_training_update(tmp_path):
  out = tmp_path / 'diag.json'
  proc = subprocess.run(
      [sys.executable, 'launch/diagnose_update.py', '--config=configs/cartpole.py',
       '--train_updates=2', '--every=1', '--batches=1', f'--output={out}'],
      cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  report = json.loads(out.read_text())
  assert report['config'] == 'cartpole' and len(report['points']) == 3   # start, then 2 updates
  for point in report['points']:
    # The sum's gradient is the norm of the terms' sum: at most the sum of their norms.
    terms = point['grad/policy'] + point['grad/baseline'] + point['grad/entropy']
    assert 0 < point['grad/total'] <= terms * (1 + 1e-5)
    assert 0 < point['clip_scale'] <= 1 and point['kl_update'] >= 0
    assert 0 <= point['eps_dominated'] <= 1 and point['rho/min'] <= point['rho/max']
