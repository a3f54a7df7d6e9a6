"""Perturbation saliency (Greydanus et al. 2018, "Visualizing and Understanding
Atari Agents", arXiv 1711.00138), for frames and for NetHack's glyph map.

Atari: phi(I, M) = I * (1 - M) + blur(I) * M blurs the frames under a Gaussian mask M at each grid
point; NetHack blanks blocks of map cells to BLANK_GLYPH. S_pi = 1/2 ||logits(I) - logits(phi)||^2
and S_V = 1/2 (V(I) - V(phi))^2, V the task's unnormalised value, at the recurrent state the agent
had at that step.
"""

from typing import Any, Callable, Dict, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from rl import popart

MASK_SIGMA = 5.0   # pixels, the paper's mask width on 84x84 frames
BLUR_SIGMA = 3.0   # pixels, the blur that replaces the masked area
BLANK_GLYPH = 2359  # nle.nethack.GLYPH_CMAP_OFF: S_stone, unexplored dark space


def _gaussian_kernel(sigma: float) -> np.ndarray:
  radius = int(3 * sigma)
  x = np.arange(-radius, radius + 1)
  k = np.exp(-x ** 2 / (2 * sigma ** 2))
  return k / k.sum()


def blur(frames: np.ndarray, sigma: float = BLUR_SIGMA) -> np.ndarray:
  """Separable Gaussian blur of [..., H, W] over the last two axes (edges
  reflected, kernel radius 3 sigma); float32."""
  k = _gaussian_kernel(sigma)
  r = len(k) // 2
  x = np.asarray(frames, np.float32)
  pad = [(0, 0)] * (x.ndim - 2)
  x = np.pad(x, pad + [(r, r), (0, 0)], mode='reflect')
  x = sum(k[i] * x[..., i:i + x.shape[-2] - 2 * r, :] for i in range(len(k)))
  x = np.pad(x, pad + [(0, 0), (r, r)], mode='reflect')
  return sum(k[i] * x[..., i:i + x.shape[-1] - 2 * r] for i in range(len(k)))


def grid(height: int, width: int, stride: int) -> np.ndarray:
  """int [N, 2]: the grid's (i, j), i in 0, stride, ... < height and j likewise, row-major."""
  return np.array([(i, j) for i in range(0, height, stride) for j in range(0, width, stride)])


def frame_masks(height: int, width: int, stride: int, sigma: float = MASK_SIGMA) -> np.ndarray:
  """float32 [N, H, W] Gaussian masks in [0, 1], 1 at each centre of grid(height, width, stride)."""
  ys, xs = np.mgrid[:height, :width]
  c = grid(height, width, stride)
  d2 = (ys[None] - c[:, 0, None, None]) ** 2 + (xs[None] - c[:, 1, None, None]) ** 2
  return np.exp(-d2 / (2 * sigma ** 2)).astype(np.float32)


def perturb_frames(frames: np.ndarray, masks: np.ndarray) -> np.ndarray:
  """phi(I, M) for stacked frames uint8 [C, H, W] and each of masks [N, H, W]:
  uint8 [N, C, H, W], rounded and clipped."""
  f = np.asarray(frames, np.float32)
  b = blur(f)
  m = masks[:, None]
  return np.clip(np.rint(f[None] * (1 - m) + b[None] * m), 0, 255).astype(np.uint8)


def perturb_glyphs(glyphs: np.ndarray, block: int) -> Tuple[np.ndarray, np.ndarray]:
  """([N, H, W] maps of glyphs [H, W], each with one block x block of cells
  set to BLANK_GLYPH; [N, 2] the blocks' top-left corners, grid(H, W, block))."""
  h, w = glyphs.shape
  corners = grid(h, w, block)
  out = np.repeat(glyphs[None], len(corners), axis=0)
  for n, (i, j) in enumerate(corners):
    out[n, i:i + block, j:j + block] = BLANK_GLYPH
  return out, corners


def make_scorer(network, task_id: int) -> Callable:
  """A jitted scorer of N observations at one recurrent state.

  Returns:
    scores(variables, obs {k: [N, ...]}, first [N], core_state (batch 1)) ->
    (logits [N, A], value [N] of task `task_id`'s head (head 0 for a single
    head), unnormalised with the variables' PopArt statistics).
  """

  @jax.jit
  def scores(variables, obs, first, core_state):
    n = first.shape[0]
    state = jax.tree.map(lambda s: jnp.broadcast_to(s, (n,) + s.shape[1:]), core_state)
    obs = jax.tree.map(lambda x: x[None], obs)
    logits, values, _ = network.apply(variables, obs, first[None], state)
    k = task_id if values.shape[-1] > 1 else 0
    stats = jax.tree.map(lambda x: x[k], variables['popart']['value_head'])
    return logits[0], popart.unnormalize_all(stats, values[0, :, k])

  return scores


def saliency_scores(scorer: Callable, variables, obs: Dict[str, np.ndarray], first: bool,
                    core_state: Any, key: str, perturbed: np.ndarray,
                    chunk: int = 256) -> Tuple[np.ndarray, np.ndarray]:
  """(S_pi [N], S_V [N]) of N perturbed versions [N, ...] of obs[key], the
  other keys as observed, scored in batches of `chunk`.

  Args:
    obs: one step's observations, without batch axis.
    core_state: the recurrent state before the step (batch 1).
  """
  base_obs = {k: np.asarray(v)[None] for k, v in obs.items()}
  logits0, value0 = scorer(variables, base_obs, np.array([first]), core_state)
  s_pi, s_v = [], []
  for start in range(0, len(perturbed), chunk):
    p = perturbed[start:start + chunk]
    batch = {k: np.repeat(v, len(p), axis=0) for k, v in base_obs.items()}
    batch[key] = p
    logits, value = scorer(variables, batch, np.full(len(p), first), core_state)
    s_pi.append(0.5 * np.sum((np.asarray(logits) - np.asarray(logits0)) ** 2, axis=-1))
    s_v.append(0.5 * (np.asarray(value) - np.asarray(value0)) ** 2)
  return np.concatenate(s_pi), np.concatenate(s_v)


def upsample(scores: np.ndarray, centres: np.ndarray, shape: Tuple[int, int],
             stride: int) -> np.ndarray:
  """float32 [H, W] map with each grid point's score over its stride block
  (centres [N, 2] the blocks' top-left corners)."""
  out = np.zeros(shape, np.float32)
  for s, (i, j) in zip(scores, centres):
    out[i:i + stride, j:j + stride] = s
  return out


def overlay(image: np.ndarray, policy_map: np.ndarray, value_map: np.ndarray,
            policy_scale: float, value_scale: float, alpha: float = 0.7) -> np.ndarray:
  """Adds alpha * 255 times the policy (red) and value (green) maps, each over
  its scale, clipped to [0, 1] and resized bilinearly, to uint8 RGB [H, W, 3]."""
  from PIL import Image
  h, w = image.shape[:2]

  def resize(m, scale):
    m = np.clip(m / max(scale, 1e-12), 0.0, 1.0)
    return np.asarray(Image.fromarray((m * 255).astype(np.uint8)).resize((w, h), Image.BILINEAR),
                      np.float32) / 255.0

  out = image.astype(np.float32).copy()
  out[..., 0] += alpha * 255 * resize(policy_map, policy_scale)
  out[..., 1] += alpha * 255 * resize(value_map, value_scale)
  return np.clip(out, 0, 255).astype(np.uint8)
