"""Where an attention agent looks: its weights over an episode, laid on the screen it sees.

The weights the torso sows into 'intermediates': `attention` (Atari; Mott et al. 2019, arXiv
1906.02500: four queries over a 9x9 grid) or `nle_attention` (NetHack: one blstats query over a 3x10
grid of the glyph map). launch/attention_maps.py writes the strips, `summary` and a video.
"""

import dataclasses
import functools
from typing import List, Sequence, Tuple

import flax
import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image

from analysis import evaluation
from envs import render

WEIGHTS_NAME = 'attention_weights'
ATARI_FRAME = 84                       # the attention network's input side
NLE_MAP = (21, 79)                     # the glyph map, rows 1..21 of the terminal
NLE_TERMINAL = (24, 80)
# The colour of attention: weight 0 adds nothing, the scale's weight adds ALPHA of this colour.
COLOUR = np.array([255.0, 200.0, 0.0], np.float32)
ALPHA = 0.75


class AttentionError(ValueError):
  """A run without attention weights, or a wrong flag: one line, exit status 2."""


@dataclasses.dataclass
class AttentionStep:
  """One step of the episode: what the screen showed and where each query looked."""
  step: int
  image: np.ndarray      # uint8 [H, W, 3]: the Atari screen, or the NetHack terminal drawn
  weights: np.ndarray    # float32 [Q, h, w], each query's weights summing to 1


def attention_weights(network, variables, obs, first, state) -> jnp.ndarray:
  """The attention weights of one step of one env (traceable: jit it).

  Args:
    obs: one env's observation, each key without time or batch axis.
    first: bool [], whether the observation starts an episode.
    state: the core state before the step, batch 1.

  Returns:
    float32 [Q, h, w]: 4 queries over 9x9 (Atari) or 1 over 3x10 (NetHack).

  Raises:
    AttentionError: when the network sows no WEIGHTS_NAME.
  """
  batched = jax.tree.map(lambda x: jnp.asarray(x)[None, None], obs)
  _, inter = network.apply(variables, batched, jnp.reshape(first, (1, 1)), state,
                           mutable=['intermediates'])
  flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(inter.get('intermediates', {})))
  found = [v for k, v in flat.items() if k[-1] == WEIGHTS_NAME]
  if not found:
    raise AttentionError(
        f"the run's network ({network.torso}) has no attention weights: attention maps need "
        "network.name 'attention' (Atari) or 'nle_attention' (NetHack)")
  (w,) = found[0]
  # [T=1, B=1, Q, h, w] (Atari) or [N=1, h, w] (NetHack) -> [Q, h, w]
  return w.astype(jnp.float32).reshape((-1,) + w.shape[-2:])


def attention_episode(run, task_id: int, start: int, stop: int, greedy: bool,
                      seed: int) -> List[AttentionStep]:
  """Plays one episode of a task and keeps the attention weights of steps
  [start, stop); fewer when the episode ends first.

  Raises:
    AttentionError: when the run's network has no attention weights.
  """
  if run.network.torso not in ('attention', 'nle_attention'):
    raise AttentionError(
        f"the run's network is {run.network.torso!r}: attention maps need network.name "
        "'attention' (Atari) or 'nle_attention' (NetHack)")
  weigh = jax.jit(functools.partial(attention_weights, run.network))
  out = []

  def observe(t, obs, first, state, frame):
    if t < start:
      return
    single = {k: v[0] for k, v in obs.items()}
    weights = np.asarray(weigh(run.variables, single, jnp.asarray(first[0]), state))
    image = render.render_tty(*frame) if isinstance(frame, render.TtyFrame) else np.asarray(frame)
    out.append(AttentionStep(t, image, weights))

  evaluation.play_one_episode(run, task_id, observe, max_steps=stop, seed=seed, greedy=greedy)
  return out


def _interpolate(values: np.ndarray, centres: np.ndarray, size: int) -> np.ndarray:
  """[n] values at pixel centres -> [size], linear between centres, flat beyond."""
  return np.interp(np.arange(size) + 0.5, centres, values)


def weight_map(weights: np.ndarray, nethack: bool) -> np.ndarray:
  """One query's weights [h, w] as a float32 map on the screen's own grid.

  Atari: [84, 84]; grid cell j is the second conv layer's unit j, whose receptive field spans pixels
  8j .. 8j + 19 (kernels 8/4 then 4/2), so its weight sits at 8j + 9.5, linear in between. NetHack:
  [24, 80] terminal cells; after three 3x3/2 max-pools grid cell (i, j) is centred on map cell
  (8i, 8j); 0 outside the map rows 1..21.
  """
  h, w = weights.shape
  if nethack:
    rows, cols, (size_r, size_c) = 8.0 * np.arange(h) + 0.5, 8.0 * np.arange(w) + 0.5, NLE_MAP
  else:
    rows = cols = 8.0 * np.arange(h) + 9.5
    size_r = size_c = ATARI_FRAME
  by_row = np.stack([_interpolate(weights[i], cols, size_c) for i in range(h)])   # [h, C]
  out = np.stack([_interpolate(by_row[:, j], rows, size_r) for j in range(size_c)], 1)
  if nethack:
    r0 = 1   # the map is rows 1..21 of the terminal
    full = np.zeros(NLE_TERMINAL, np.float32)
    full[r0:r0 + NLE_MAP[0], :NLE_MAP[1]] = out
    out = full
  return out.astype(np.float32)


def overlay(image: np.ndarray, weight_map_: np.ndarray, scale: float,
            floor: float = 0.0) -> np.ndarray:
  """Blends COLOUR into uint8 [H, W, 3] image with ALPHA times
  (map - floor) / (scale - floor), clipped to [0, 1] and resized bilinearly.

  With `floor` the uniform weight 1 / P, a query that looks everywhere alike draws nothing.
  """
  h, w = image.shape[:2]
  m = np.clip((weight_map_ - floor) / max(scale - floor, 1e-12), 0.0, 1.0)
  m = np.asarray(Image.fromarray(m.astype(np.float32), mode='F').resize((w, h), Image.BILINEAR),
                 np.float32)[..., None]
  out = image.astype(np.float32) * (1.0 - ALPHA * m) + COLOUR * (ALPHA * m)
  return np.clip(out, 0, 255).astype(np.uint8)


def draw_strip(step: AttentionStep, scales: Sequence[float], nethack: bool,
               gap: int = 4) -> np.ndarray:
  """One step as a strip: the screen, then each query's weights laid on it (`overlay`).

  Args:
    scales: per query, the weight drawn at full strength (one per episode, so frames compare).
    gap: white pixels between panels.

  Returns:
    uint8 [H, (Q + 1) * W + Q * gap, 3].
  """
  uniform = 1.0 / step.weights[0].size
  panels = [step.image] + [overlay(step.image, weight_map(q, nethack), s, uniform)
                           for q, s in zip(step.weights, scales)]
  h = step.image.shape[0]
  spacer = np.full((h, gap, 3), 255, np.uint8)
  out = [panels[0]]
  for p in panels[1:]:
    out += [spacer, p]
  return np.concatenate(out, axis=1)


def summary(steps: Sequence[AttentionStep]) -> Tuple[List[float], List[dict]]:
  """Per query the scale to draw with, and per step each query's numbers.

  Returns:
    (scales, rows): scales[q] is query q's largest weight over the steps; rows[k] is {'step',
    'queries': [{'entropy' (nats), 'peak', 'argmax' ([row, column] of the grid)}]}.
  """
  scales = [float(max(s.weights[q].max() for s in steps)) for q in range(len(steps[0].weights))]
  rows = []
  for s in steps:
    queries = []
    for q in s.weights:
      p = q.reshape(-1).astype(np.float64)
      queries.append({'entropy': float(-(p * np.log(np.maximum(p, 1e-30))).sum()),
                      'peak': float(p.max()),
                      'argmax': [int(v) for v in np.unravel_index(int(p.argmax()), q.shape)]})
    rows.append({'step': s.step, 'queries': queries})
  return scales, rows
