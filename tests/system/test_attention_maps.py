"""Attention maps (analysis/attention_maps.py, launch/attention_maps.py): each
grid cell drawn where its receptive field is centred, uniform attention
drawn as nothing, the numbers per query by hand, and the command end to
end on tiny Pong and NetHack attention runs."""

import json
import math
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from analysis import attention_maps as att
from tests.support import full_disk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_each_atari_cell_peaks_at_its_receptive_field_centre():
  # Cell j of the 9x9 grid sees input pixels 8j .. 8j + 19 (kernels 8/4, 4/2).
  for i, j in [(0, 0), (4, 6), (8, 8)]:
    w = np.zeros((9, 9)); w[i, j] = 1.0
    m = att.weight_map(w, nethack=False)
    assert m.shape == (84, 84)
    r, c = 8 * i + 9, 8 * j + 9          # pixel 8j + 9 spans the centre 8j + 9.5
    assert m[r, c] == pytest.approx(1.0) and m.max() == pytest.approx(1.0)
    # Linear to the neighbouring cells' centres, 8 pixels on, where it is 0.
    assert m[r, min(c + 8, 83)] == pytest.approx(0.0 if j < 8 else 1.0)
    assert m[r, c - 4] == pytest.approx(0.5 if j > 0 else 1.0)   # flat before the first centre


def test_each_nethack_cell_lands_on_its_map_cells_of_the_terminal():
  w = np.zeros((3, 10)); w[1, 2] = 1.0
  m = att.weight_map(w, nethack=True)
  assert m.shape == (24, 80)
  assert np.unravel_index(m.argmax(), m.shape) == (1 + 8, 16)   # map row 8 is terminal row 9
  assert m[0].max() == 0 and m[22:].max() == 0                  # the message and status lines


def test_uniform_attention_draws_nothing_and_a_peak_draws_full_strength():
  image = np.full((84, 84, 3), 40, np.uint8)   # the map's own size: no resampling
  uniform = np.full((9, 9), 1 / 81)
  same = att.overlay(image, att.weight_map(uniform, False), scale=0.5, floor=1 / 81)
  np.testing.assert_array_equal(same, image)
  peak = np.full((9, 9), 0.0); peak[4, 4] = 1.0
  drawn = att.overlay(image, att.weight_map(peak, False), scale=1.0, floor=1 / 81)
  centre = drawn[41, 41].astype(float)        # cell 4's centre, 8 * 4 + 9
  np.testing.assert_allclose(centre, 40 * (1 - att.ALPHA) + att.COLOUR * att.ALPHA, atol=1)
  assert (drawn[0, 0] == image[0, 0]).all()


def test_summary_by_hand():
  w = np.zeros((2, 9, 9), np.float32)
  w[0] = 1 / 81                          # uniform: entropy log 81
  w[1, 2, 3] = 0.5; w[1, 7, 1] = 0.5     # two cells: entropy log 2, peak 0.5
  steps = [att.AttentionStep(5, np.zeros((2, 2, 3), np.uint8), w)]
  scales, rows = att.summary(steps)
  assert scales == pytest.approx([1 / 81, 0.5])
  q0, q1 = rows[0]['queries']
  assert rows[0]['step'] == 5
  assert q0['entropy'] == pytest.approx(math.log(81), rel=1e-5)
  assert q1 == {'entropy': pytest.approx(math.log(2)), 'peak': 0.5, 'argmax': [2, 3]}
  strip = att.draw_strip(steps[0], scales, nethack=False, gap=4)
  assert strip.shape == (2, 3 * 2 + 2 * 4, 3)


def test_a_network_without_attention_is_one_line():
  run = SimpleNamespace(network=SimpleNamespace(torso='shallow'))
  with pytest.raises(att.AttentionError, match="network is 'shallow': attention maps need"):
    att.attention_episode(run, 0, 0, 5, False, 0)


def _train(tmp_path, config):
  from tests.support.training_runs import train
  config.workdir = str(tmp_path / 'run')
  train(config)
  return config.workdir


def _command(*args):
  return subprocess.run([sys.executable, 'launch/attention_maps.py', *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # the full suite only, not the CI tier (docs/testing.md): an attention run on Pong trained first, 3-4 min
def test_command_on_a_tiny_pong_attention_run(tmp_path):
  from configs import atari_single
  workdir = _train(tmp_path, atari_single.get_config('game=Pong,net=attention,smoke'))
  proc = _command(f'--workdir={workdir}', '--frames=2:5', '--video', '--gif', '--rows=2')
  assert proc.returncode == 0, proc.stderr
  out = next((tmp_path / 'run' / 'attention').iterdir())
  assert sorted(p.name for p in out.glob('step_*.png')) == [
      'step_00002.png', 'step_00003.png', 'step_00004.png']
  # The full-resolution screen and one panel per query, 4 px apart.
  assert Image.open(out / 'step_00002.png').size == (5 * 160 + 4 * 4, 210)
  assert Image.open(out / 'overview.png').size == (5 * 160 + 4 * 4, 2 * 210 + 4)
  info = json.loads((out / 'attention.json').read_text())
  assert info['network'] == 'attention' and info['grid'] == [9, 9] and len(info['scales']) == 4
  assert [r['step'] for r in info['steps']] == [2, 3, 4] and info['overview_steps'] == [2, 4]
  for row in info['steps']:
    for q in row['queries']:
      assert 0 < q['entropy'] <= math.log(81) + 1e-6 and 1 / 81 - 1e-6 <= q['peak'] <= 1
  assert (out / 'attention.mp4').read_bytes()[4:8] == b'ftyp'   # an MP4 container
  assert (out / 'attention.gif').read_bytes()[:3] == b'GIF'
  # A full disk: one line, exit 2, and no PNG or JSON left empty or cut short.
  full = tmp_path / 'full'
  proc = full_disk.run_tool('attention_maps.py', full, f'--workdir={workdir}', '--frames=2:4',
                            '--gif', f'--output={full}')
  assert proc.returncode == 2 and 'Traceback' not in proc.stderr, proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == (
      f'error: cannot write into {full}: No space left on device'), proc.stderr
  assert full_disk.files_under(full) == []
  bad = _command(f'--workdir={workdir}', '--task=Breakout')
  assert bad.returncode == 2
  assert bad.stderr.strip() == "error: unknown task 'Breakout'; the run has Pong", bad.stderr
  bad = _command(f'--workdir={workdir}', '--frames=4:4')
  assert bad.returncode == 2 and bad.stderr.strip() == (
      "error: --frames must be A:B with 0 <= A < B, got '4:4'")


def test_command_on_a_tiny_nethack_attention_run(tmp_path):
  from configs import nethack_popart
  from envs import render
  workdir = _train(tmp_path, nethack_popart.get_config('chars=val-dwa-law-fem,net=nle_attention,'
                                                       'smoke'))
  out = tmp_path / 'maps'
  proc = _command(f'--workdir={workdir}', '--frames=1:3', f'--output={out}')
  assert proc.returncode == 0, proc.stderr
  ch, cw = render.cell_size()
  # The terminal, then the one query over the 3x10 grid on it.
  assert Image.open(out / 'step_00001.png').size == (2 * 80 * cw + 4, 24 * ch)
  info = json.loads((out / 'attention.json').read_text())
  assert info['network'] == 'nle_attention' and info['grid'] == [3, 10]
  assert len(info['steps'][0]['queries']) == 1
