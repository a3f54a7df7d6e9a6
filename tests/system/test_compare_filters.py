"""Filter comparison: distances by index and by optimal matching, checked on
hand-made kernels, and the command on two tiny Atari runs."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from analysis.filters import conv_kernels, filter_distances, pick_steps
from tests.support import full_disk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_permuted_filters_are_far_by_index_and_equal_after_matching():
  rng = np.random.default_rng(0)
  a = rng.normal(size=(3, 3, 2, 5))
  b = a[..., [4, 2, 0, 1, 3]]
  d = filter_distances(a, b)
  assert d['matched'] == pytest.approx(0.0, abs=1e-12)
  assert d['index'] > 0.5
  assert filter_distances(a, a) == {'index': 0.0, 'matched': 0.0}


def test_distance_by_hand():
  a = np.zeros((1, 1, 1, 2)); a[..., 0] = 1.0; a[..., 1] = 3.0   # filters [1], [3]
  b = np.zeros((1, 1, 1, 2)); b[..., 0] = 3.0; b[..., 1] = 1.0   # swapped
  d = filter_distances(a, b)
  # index: |1-3| and |3-1| -> mean 2; mean norm 2 -> 1.0; matched: 0.
  assert d == {'index': pytest.approx(1.0), 'matched': pytest.approx(0.0)}


def test_conv_kernels_and_step_picking():
  params = {'torso': {'conv1': {'kernel': np.zeros((8, 8, 4, 32)), 'bias': np.zeros(32)},
                      'fc': {'kernel': np.zeros((10, 5))}}}
  assert list(conv_kernels(params)) == ['torso/conv1']
  assert pick_steps([10, 20, 30, 40], 3) == [10, 20, 40]
  assert pick_steps([0, 10, 20, 30], 5) == [0, 10, 20, 30]


def test_command_on_two_runs(tmp_path):
  from configs import atari_single
  from tests.support.training_runs import train
  runs = []
  for seed in (0, 1):
    config = atari_single.get_config('game=Pong,smoke')
    config.seed = seed
    config.workdir = str(tmp_path / f'run{seed}')
    config.total_env_steps = 3 * config.unroll_length * config.batch_size
    config.checkpoint_every_steps = config.unroll_length * config.batch_size
    config.keep_intermediate = True
    train(config)
    runs.append(config.workdir)
  out = tmp_path / 'filters'
  proc = subprocess.run([sys.executable, 'launch/compare_filters.py', f'--runs={",".join(runs)}',
                         '--points=3', f'--output={out}'], cwd=ROOT, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr
  rows = json.loads((out / 'filters.json').read_text())['rows']
  assert {r['layer'] for r in rows} == {'torso/conv1', 'torso/conv2', 'torso/conv3'}
  assert len(rows) == 3 * 3
  assert all(r['matched'] <= r['index'] + 1e-9 for r in rows)
  assert (out / 'filters_torso_conv1.png').exists()
  # A full disk (issue [25]): one line, exit 2, the earlier results kept whole.
  before = {name: (out / name).read_bytes() for name in full_disk.files_under(out)}
  proc = full_disk.run_tool('compare_filters.py', out, f'--runs={",".join(runs)}', '--points=3',
                            f'--output={out}')
  assert proc.returncode == 2 and 'Traceback' not in proc.stderr, proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == (
      f'error: cannot write into {out}: No space left on device'), proc.stderr
  assert {name: (out / name).read_bytes() for name in full_disk.files_under(out)} == before
