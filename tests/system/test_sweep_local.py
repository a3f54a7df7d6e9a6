"""launch/sweep.py: the sweep yamls on this machine without an account (grid
and random search, each trial a run folder, resumable, a table at the end)."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from rundir import sweep as sweep_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SWEEP = {
    'program': 'launch/train.py', 'method': 'grid',
    'metric': {'name': 'mean_episode_return', 'goal': 'maximize'},
    'parameters': {'config.learning_rate': {'values': [0.001, 0.002]},
                   'config.entropy_cost': {'distribution': 'log_uniform_values',
                                           'min': 0.001, 'max': 0.1},
                   'config.unroll_length': {'value': 4}},
    'command': ['${env}', '${interpreter}', '${program}', '--config=configs/cartpole.py:smoke',
                '${args}'],
}


def test_grid_and_random_trials_by_hand():
  with pytest.raises(sweep_lib.SweepError, match='a grid needs values: parameter '
                                                 'config.entropy_cost is a distribution'):
    sweep_lib.trials(SWEEP, 'grid')
  grid = sweep_lib.trials(SWEEP, 'grid', fixed={'config.entropy_cost': 0.01})
  assert [t['config.learning_rate'] for t in grid] == [0.001, 0.002]
  assert all(t['config.entropy_cost'] == 0.01 and t['config.unroll_length'] == 4 for t in grid)
  drawn = sweep_lib.trials(SWEEP, 'random', count=50, seed=3)
  assert drawn == sweep_lib.trials(SWEEP, 'random', count=50, seed=3)   # reproducible
  costs = [t['config.entropy_cost'] for t in drawn]
  assert 0.001 <= min(costs) and max(costs) <= 0.1 and min(costs) < 0.01 < max(costs)
  assert {t['config.learning_rate'] for t in drawn} == {0.001, 0.002}
  with pytest.raises(sweep_lib.SweepError, match='needs --trials'):
    sweep_lib.trials(SWEEP, 'random')
  with pytest.raises(sweep_lib.SweepError, match=r"method 'bayes'.*--method=random"):
    sweep_lib.trials(SWEEP, 'bayes')
  argv = sweep_lib.command(SWEEP, grid[0], '/x/trial_0', python='py')
  assert argv == ['py', 'launch/train.py', '--config=configs/cartpole.py:smoke',
                  '--config.learning_rate=0.001', '--config.entropy_cost=0.01',
                  '--config.unroll_length=4', '--config.workdir=/x/trial_0']


def _sweep(*args):
  return subprocess.run([sys.executable, 'launch/sweep.py', *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=600)


def test_a_local_sweep_trains_each_trial_resumes_and_tables_them(tmp_path):
  path = tmp_path / 'sweep.yaml'
  path.write_text(yaml.safe_dump(SWEEP))
  folder = tmp_path / 'sweep'
  args = [f'--sweep={path}', f'--dir={folder}', '--set=config.entropy_cost=0.01']
  out = _sweep(*args)
  assert out.returncode == 0, out.stderr
  table = [line for line in out.stdout.splitlines() if line.startswith('|')]
  assert table[0].startswith('| trial | status | mean_episode_return |')
  assert len(table) == 4 and all('| finished |' in line for line in table[2:]), out.stdout
  record = json.loads((folder / 'sweep.json').read_text())
  assert [t['status'] for t in record['trials']] == ['finished', 'finished']
  for i in (0, 1):
    config = json.loads((folder / f'trial_{i}' / 'config.json').read_text())
    assert config['learning_rate'] == [0.001, 0.002][i] and config['wandb']['mode'] == 'offline'
  # A sweep stopped during trial 1: the same command trains only that one.
  record['trials'][1]['status'] = 'pending'
  (folder / 'sweep.json').write_text(json.dumps(record))
  out = _sweep(*args)
  assert out.returncode == 0, out.stderr
  assert 'trial_1: ' in out.stdout and 'trial_0: ' not in out.stdout
  # Another sweep in the same folder is refused in one line.
  out = _sweep(*args[:2], '--method=random', '--trials=1')
  assert out.returncode == 2 and out.stderr.strip().startswith(f'error: {folder} holds another '
                                                               'sweep'), out.stderr
