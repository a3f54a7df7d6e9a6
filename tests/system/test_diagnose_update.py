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


def test_advantage_groups_report_each_task_against_the_whole_batch(tmp_path):
  out = tmp_path / 'groups.json'
  proc = subprocess.run(
      [sys.executable, 'launch/diagnose_update.py', '--config=configs/cartpole_popart.py',
       '--config.vtrace.minibatches=4', '--config.vtrace.normalize_advantages=True',
       '--config.vtrace.normalize_advantages_per=task', '--advantage_groups=2', f'--output={out}'],
      cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert 'unrolls of a task per minibatch' in proc.stdout
  result = json.loads(out.read_text())['advantage_groups']
  assert sorted(result['tasks']) == ['cartpole_a', 'cartpole_b']
  # 2 batches x 4 minibatches x 2 tasks, each minibatch 16 / 4 = 4 unrolls.
  counts = result['unrolls_per_minibatch']
  assert len(counts) == 5 and sum(counts) == 16
  for t in result['tasks'].values():
    assert t['steps'] > 0 and 0 <= t['between_share'] <= 1
    assert -1 <= t['corr_task'] <= 1 and -1 <= t['corr_minibatch'] <= 1


def test_advantage_groups_refuses_the_gradient_measurements_flags():
  proc = subprocess.run(
      [sys.executable, 'launch/diagnose_update.py', '--config=configs/cartpole_popart.py',
       '--advantage_groups=1', '--train_updates=2'],
      cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert proc.returncode != 0 and '--train_updates belong to the gradient' in proc.stderr
