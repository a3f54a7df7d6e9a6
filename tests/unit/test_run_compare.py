"""analysis/run_compare.py: runs at fixed agent steps per task, by hand."""

import subprocess
import sys

import numpy as np

from analysis import run_compare
from analysis.run_metrics import Run

CONFIG = {'tasks': [{'name': 'Pong'}, {'name': 'Carnival'}]}


def _run():
  # Two tasks: env steps are twice the agent steps per task.
  rows = []
  for i, (pong, games) in enumerate([(-21.0, 2), (-18.0, 1), (-14.0, 3), (-12.0, 1)]):
    rows.append({'env_steps': 200_000 * (i + 1), 'episode_return/Pong': pong,
                 'episodes/Pong': games, 'episode_return/Carnival': 100.0 * (i + 1),
                 'episodes/Carnival': 1, 'kl_update': 0.001 * (i + 1), 'sps': 500.0 + i,
                 'grad_share_policy/Pong': 0.1 * (i + 1), 'grad_share_baseline/Pong': 0.5})
  return Run('r', rows, CONFIG)


def test_return_at_weights_each_rows_games_over_the_window():
  run = _run()   # rows at 100k, 200k, 300k, 400k agent steps per task
  # Window 250k up to 300k: the rows at 100k, 200k and 300k:
  # (-21 x 2 - 18 - 14 x 3) / 6.
  np.testing.assert_allclose(run_compare.return_at(run, 'Pong', 300_000, 250_000),
                             (-42.0 - 18.0 - 42.0) / 6)
  # Window 150k up to 300k: the rows at 200k and 300k.
  np.testing.assert_allclose(run_compare.return_at(run, 'Pong', 300_000, 150_000),
                             (-18.0 - 42.0) / 4)
  assert run_compare.return_at(run, 'Pong', 500_000, 100_000) is None   # not reached


def test_first_passing_and_medians():
  run = _run()
  # Window 100k: each row alone; -14 >= -15 first at 300k agent steps per task.
  assert run_compare.first_passing(run, 'Pong', -15.0, 100_000) == 300_000
  # Window 250k: at 300k the rows at 100k-300k, (-42 - 18 - 42) / 6 = -17;
  # at 400k those at 200k-400k, (-18 - 42 - 12) / 5 = -14.4: passed there.
  assert run_compare.first_passing(run, 'Pong', -15.0, 250_000) == 400_000
  assert run_compare.first_passing(run, 'Pong', -10.0, 100_000) is None
  np.testing.assert_allclose(run_compare.median_until(run, 'kl_update', 300_000), 0.002)
  rows = run_compare.table_rows([run], ['base'], [200_000, 400_000], 100_000, {'Pong': -15.0})
  assert rows[0] == ['base', 'Pong', '-18.0', '-12.0', '0.30M', '0.25 / 0.50', '0.0025', '502']
  assert rows[1][:4] == ['base', 'Carnival', '200', '400'] and rows[1][4:6] == ['-', '-']


def test_the_script_prints_a_table(tmp_path):
  import json
  run = _run()
  folder = tmp_path / 'run'
  folder.mkdir()
  (folder / 'config.json').write_text(json.dumps(CONFIG))
  with open(folder / 'metrics.jsonl', 'w') as f:
    for r in run.records:
      f.write(json.dumps(r) + '\n')
  out = subprocess.run([sys.executable, 'launch/compare_runs.py', str(folder), '--labels=base',
                        '--steps=200000,400000', '--threshold=Pong=-15', '--window=100000'],
                       capture_output=True, text=True, check=True).stdout
  assert '| base | Pong | -18.0 | -12.0 | 0.30M | 0.25 / 0.50 | 0.0025 | 502 |' in out
  bad = subprocess.run([sys.executable, 'launch/compare_runs.py', str(tmp_path / 'none')],
                       capture_output=True, text=True)
  assert bad.returncode == 2 and bad.stderr.startswith('error:') and 'Traceback' not in bad.stderr
