"""Perturbation saliency: masks, blur, glyph blanking and scores checked by
hand, and the command end to end on a tiny Pong run."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from analysis import saliency as sal
from tests.support import full_disk

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_blur_keeps_constants_and_masks_peak_at_their_centre():
  np.testing.assert_allclose(sal.blur(np.full((2, 20, 20), 7.0)), 7.0, rtol=1e-6)
  masks = sal.frame_masks(84, 84, stride=10)
  centres = sal.grid(84, 84, 10)
  assert masks.shape == (len(centres), 84, 84) == (81, 84, 84)
  i, j = centres[12]
  assert masks[12, i, j] == 1.0 and masks[12].max() == 1.0
  # phi(I, M): no change where the image is flat (blur of flat = flat).
  flat = np.full((4, 84, 84), 100, np.uint8)
  np.testing.assert_array_equal(sal.perturb_frames(flat, masks[:2]), flat[None].repeat(2, 0))


def test_glyph_blocks_are_blanked_one_at_a_time():
  glyphs = np.arange(21 * 79).reshape(21, 79)
  perturbed, corners = sal.perturb_glyphs(glyphs, block=3)
  assert len(perturbed) == len(corners) == 7 * 27
  n = next(k for k, c in enumerate(corners) if tuple(c) == (3, 6))
  changed = perturbed[n] != glyphs
  assert changed.sum() == 9 and changed[3:6, 6:9].all()
  assert (perturbed[n][3:6, 6:9] == sal.BLANK_GLYPH).all()


def test_scores_by_hand_with_a_toy_scorer():
  # logits = [sum of the top-left 4x4 pixels / 255, 0]; value = 2 * that.
  def scorer(variables, obs, first, state):
    s = obs['frames'][:, :, :4, :4].astype(np.float64).sum((1, 2, 3)) / 255.0
    return np.stack([s, np.zeros_like(s)], -1), 2.0 * s

  frames = np.zeros((1, 20, 20), np.uint8)
  frames[0, :4, :4] = 255
  perturbed = frames[None].repeat(2, 0)
  perturbed[1, 0, 0, 0] = 0  # one pixel of the region removed: change of 1 in the logit
  s_pi, s_v = sal.saliency_scores(scorer, None, {'frames': frames}, True, (), 'frames', perturbed)
  np.testing.assert_allclose(s_pi, [0.0, 0.5])       # 1/2 * 1^2
  np.testing.assert_allclose(s_v, [0.0, 0.5 * 4.0])  # 1/2 * 2^2
  up = sal.upsample(np.array([1.0, 2.0]), np.array([[0, 0], [0, 5]]), (5, 10), 5)
  assert up[:, :5].min() == 1.0 and up[:, 5:].min() == 2.0


def test_overlay_adds_red_for_policy_and_green_for_value():
  image = np.zeros((10, 10, 3), np.uint8)
  pmap = np.zeros((5, 5)); pmap[0, 0] = 1.0
  out = sal.overlay(image, pmap, np.zeros((5, 5)), 1.0, 1.0)
  assert out[0, 0, 0] > 100 and out[..., 1].max() == 0 and out[9, 9, 0] == 0


@pytest.mark.slow  # the full suite only, not the CI tier (docs/testing.md): a Pong run trained first, about 2 min
def test_command_on_a_tiny_pong_run(tmp_path):
  from configs import atari_single
  from tests.support.training_runs import train
  config = atari_single.get_config('game=Pong,smoke')
  config.workdir = str(tmp_path / 'run')
  train(config)
  proc = subprocess.run(
      [sys.executable, 'launch/saliency.py', f'--workdir={config.workdir}', '--task=Pong',
       '--frames=2:4', '--stride=12', '--gif'], cwd=ROOT, capture_output=True, text=True,
      timeout=300)
  assert proc.returncode == 0, proc.stderr
  out = next((tmp_path / 'run' / 'saliency').iterdir())
  pngs = sorted(p.name for p in out.glob('frame_*.png'))
  assert pngs == ['frame_00002.png', 'frame_00003.png']
  from PIL import Image
  assert Image.open(out / pngs[0]).size == (160, 210)  # full-resolution colour frame
  info = json.loads((out / 'saliency.json').read_text())
  assert info['task'] == 'Pong' and len(info['frames']) == 2
  assert (out / 'saliency.gif').exists()
  # A full disk (issue [25]): one line, exit 2, and no PNG, JSON or GIF left
  # empty or cut short.
  full = tmp_path / 'full'
  proc = full_disk.run_tool('saliency.py', full, f'--workdir={config.workdir}', '--task=Pong',
                            '--frames=2:4', '--stride=12', '--gif', f'--output={full}')
  assert proc.returncode == 2 and 'Traceback' not in proc.stderr, proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == (
      f'error: cannot write into {full}: No space left on device'), proc.stderr
  assert full_disk.files_under(full) == []
  bad = subprocess.run([sys.executable, 'launch/saliency.py', f'--workdir={config.workdir}',
                        '--task=Breakout'], cwd=ROOT, capture_output=True, text=True, timeout=300)
  # One line naming the mistake: no usage text, no orbax log lines.
  assert bad.returncode == 2
  assert bad.stderr.strip() == "error: unknown task 'Breakout'; the run has Pong", bad.stderr
  bad = subprocess.run([sys.executable, 'launch/saliency.py', f'--workdir={config.workdir}',
                        '--frames=5:2'], cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert bad.returncode == 2 and bad.stderr.strip() == (
      "error: --frames must be A:B with 0 <= A < B, got '5:2'")


def test_command_on_a_tiny_nethack_run(tmp_path):
  from configs import nethack_popart
  from tests.support.training_runs import train
  config = nethack_popart.get_config('chars=val-dwa-law-fem,smoke')
  config.workdir = str(tmp_path / 'run')
  train(config)
  out = tmp_path / 'sal'
  proc = subprocess.run(
      [sys.executable, 'launch/saliency.py', f'--workdir={config.workdir}', '--frames=1:2',
       '--stride=7', f'--output={out}'], cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr
  from PIL import Image
  from envs import render
  ch, cw = render.cell_size()
  assert Image.open(out / 'frame_00001.png').size == (80 * cw, 24 * ch)  # the terminal
