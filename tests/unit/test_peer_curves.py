"""NLE's agent's training curve read from its logs, and the binned means
with their standard errors, against values worked out by hand."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from analysis import peer_curves

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What python -m nle.agent.agent prints (abridged): a line every 5 s, some repeated.
STDOUT = """\
[INFO:14691 agent:571 2026-11-26 12:20:59,401] Steps 0 @ 0.0 SPS. Loss inf. Stats:
{'episode_returns': (),
 'mean_episode_return': nan}
[INFO:14691 agent:571 2026-11-26 12:21:09,401] Steps 1000 @ 100.0 SPS. Loss 1.0. Stats:
[INFO:14691 agent:571 2026-11-26 12:21:14,401] Steps 1000 @ 0.0 SPS. Loss 1.0. Stats:
[INFO:14691 agent:571 2026-11-26 12:21:29,401] Steps 3000 @ 100.0 SPS. Loss 1.0. Stats:
"""
LOGS_TSV = """\
# Step\ttotal_loss\tmean_episode_return\tpg_loss
0\t1.0\tnan\t1.0
500\t1.0\t10.0\t1.0
1500\t1.0\tnan\t1.0
2000\t1.0\t20.0\t1.0
3000\t1.0\t40.0\t1.0
"""


def _peer(tmp_path):
  (tmp_path / 'latest').mkdir()
  (tmp_path / 'latest' / 'logs.tsv').write_text(LOGS_TSV)
  (tmp_path / 'nle.log').write_text(STDOUT)
  return peer_curves.peer_curve(str(tmp_path / 'latest' / 'logs.tsv'), str(tmp_path / 'nle.log'))


def test_the_peer_curve_keeps_rows_with_games_at_interpolated_times(tmp_path):
  curve = _peer(tmp_path)
  np.testing.assert_array_equal(curve.steps, [500, 2000, 3000])
  np.testing.assert_array_equal(curve.returns, [10, 20, 40])
  # Steps 0 at 0 s, 1000 at 10 s (its repeat at 15 s is dropped), 3000 at 30 s:
  # 500 -> 5 s, 2000 -> between (1000, 10 s) and (3000, 30 s) -> 20 s.
  np.testing.assert_allclose(curve.seconds, [5.0, 20.0, 30.0])
  np.testing.assert_array_equal(curve.games, [1, 1, 1])


def test_a_log_without_step_lines_or_with_two_runs_is_refused(tmp_path):
  with pytest.raises(ValueError, match="no 'Steps N @' lines"):
    peer_curves.log_times(['hello', 'world'])
  lines = STDOUT.splitlines()
  with pytest.raises(ValueError, match='steps go back from 3,000 to 0'):
    peer_curves.log_times(lines + lines)


def test_a_cut_off_last_row_is_skipped(tmp_path):
  (tmp_path / 'latest').mkdir()
  (tmp_path / 'latest' / 'logs.tsv').write_text(LOGS_TSV + '3640\t1.0')
  (tmp_path / 'nle.log').write_text(STDOUT)
  curve = peer_curves.peer_curve(str(tmp_path / 'latest' / 'logs.tsv'), str(tmp_path / 'nle.log'))
  assert list(curve.steps) == [500, 2000, 3000]


def test_our_time_keeps_going_across_a_resume():
  records = [{'env_steps': 10, 'time': 5.0, 'episodes/t': 1, 'episode_return/t': 1.0},
             {'env_steps': 20, 'time': 9.0},
             {'env_steps': 30, 'time': 2.0, 'episodes/t': 2, 'episode_return/t': 3.0}]
  curve = peer_curves.our_curve(records, 't')
  np.testing.assert_array_equal(curve.seconds, [5.0, 9.0])  # resumed: 2 s after 9 s -> 9 s
  np.testing.assert_array_equal(curve.games, [1, 2])


def test_the_weighted_mean_and_its_standard_error_by_hand():
  # Rows of 1, 2 and 1 games with means 10, 20, 40: mean (10 + 40 + 40) / 4 = 22.5;
  # sum w^2 (x - m)^2 = 156.25 + 25 + 306.25 = 487.5, times 3/2 = 731.25,
  # sqrt = 27.0416..., over sum w = 4: 6.7604.
  mean, se = peer_curves.weighted_mean(np.array([10., 20., 40.]), np.array([1., 2., 1.]))
  assert mean == pytest.approx(22.5)
  assert se == pytest.approx(math.sqrt(731.25) / 4)
  assert math.isnan(peer_curves.weighted_mean(np.array([5.]), np.array([3.]))[1])


def test_bins_and_the_last_window():
  curve = peer_curves.Curve(np.array([10., 30., 40., 90.]), np.array([1., 2., 3., 4.]),
                            np.array([1., 2., 4., 8.]), np.array([1., 1., 3., 2.]))
  bins = peer_curves.binned(curve, 25, 'steps', end=100)
  assert [(b.lo, b.hi, b.games) for b in bins] == [(0, 25, 1), (25, 50, 4), (75, 100, 2)]
  assert bins[1].mean == pytest.approx((2 + 12) / 4)
  mean, _, games = peer_curves.last_window(curve, 60, 90)
  assert (mean, games) == (pytest.approx((12 + 16) / 5), 5)  # rows at 40 and 90
  by_time = peer_curves.binned(curve, 2.5, 'seconds')
  assert [b.games for b in by_time] == [2, 5]


def test_the_command_writes_both_figures_and_the_summary(tmp_path):
  _peer(tmp_path)
  run = tmp_path / 'run'
  run.mkdir()
  rows = [{'env_steps': s, 'time': s / 100, 'episodes/mon-hum-neu-mal': 2,
           'episode_return/mon-hum-neu-mal': r}
          for s, r in ((800, 5.0), (1600, 15.0), (3200, 25.0))]
  (run / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
  out = subprocess.run(
      [sys.executable, 'launch/plot_side_by_side.py', f'--run={run}', f'--peer_dir={tmp_path}',
       f'--peer_stdout={tmp_path / "nle.log"}', '--bin_steps=1000', '--bin_seconds=10',
       '--window=2000', f'--output={tmp_path / "sbs"}'],
      cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  assert (tmp_path / 'sbs_steps.png').stat().st_size > 0
  assert (tmp_path / 'sbs_time.png').stat().st_size > 0
  summary = json.loads((tmp_path / 'sbs.json').read_text())
  assert summary['steps'] == 3000  # the fewer of the two runs' steps
  assert summary['this project']['games'] == 2 and summary['this project']['mean'] == 15.0
  assert summary["NLE's agent"]['games'] == 2 and summary["NLE's agent"]['mean'] == 30.0
  assert '| 0-1,000 | 5.0 (2) | 10.0 (1) |' in out.stdout
  assert '| 2,000-3,000 |  | 30.0 +- 10.0 (2) |' in out.stdout
