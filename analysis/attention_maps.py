"""Where an attention agent looks: its attention weights over one episode,
laid on the screen it sees.

Two networks sow their weights into 'intermediates' (networks/attention.py,
networks/nethack.py):
- `attention` (Atari; Mott et al. 2019, arXiv 1906.02500): four queries,
  each a softmax over the 9x9 grid of the vision core. Grid cell j is the
  second conv layer's unit j, whose receptive field spans input pixels
  8j .. 8j + 19 of the 84x84 frame (kernels 8/4 then 4/2), so its weight is
  drawn centred at pixel 8j + 9.5, interpolated between cells, and the
  84x84 map is resized onto the full-resolution screen (EnvPool's frame is
  the whole screen resized).
- `nle_attention` (NetHack, the course report's torso): one query from the
  blstats over the 3x10 grid after three 3x3/2 max-pools of the 21x79
  glyph map, so cell (i, j) is centred on map cell (8i, 8j); the map is
  rows 1..21 of the 24x80 terminal drawn by envs/render.py.

`attention_episode` plays one episode with the checkpoint's policy and keeps
each step's weights and frame; `draw_strip` draws one step as a strip, the
screen then one panel per query; `summary` gives each query's entropy and
peak. launch/attention_maps.py writes them as PNGs, a JSON file and a video.
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
# The colour of attention: weight 0 adds nothing, the scale's weight adds
# ALPHA of this colour.
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
    network: an AgentNetwork whose torso sows WEIGHTS_NAME ('attention' or
      'nle_attention').
    variables: its variables.
    obs: one env's observation, each key [...] (no time or batch axis).
    first: bool [], whether the observation starts an episode.
    state: the core state before the step, batch 1.

  Returns:
    float32 [Q, h, w]: Q = 4 queries over 9x9 (Atari), Q = 1 over 3x10
    (NetHack).

  Raises:
    AttentionError: when the network sows no attention weights.
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
  [start, stop).

  Args:
    run: the loaded run (analysis/run_loading.LoadedRun) of an attention
      network.
    task_id: the task.
    start: the first step kept.
    stop: the episode is played to this step or its end.
    greedy: act greedily (argmax).
    seed: the env seed and the sampling key's.

  Returns:
    Per kept step an AttentionStep; fewer than stop - start when the
    episode ended first.

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
  """One query's weights [h, w] as a map on the screen's own grid.

  Atari: [84, 84], each cell's weight at its receptive field's centre
  (8j + 9.5), linear in between. NetHack: [24, 80] terminal cells, each map
  cell taking its grid cell's weight at (8i, 8j), linear in between; 0
  outside the map rows.

  Args:
    weights: float [h, w].
    nethack: the NetHack grid (3x10 over the map) instead of Atari's 9x9.

  Returns:
    float32 map.
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
  """Lays a weight map on an RGB image: (map - floor) / (scale - floor),
  clipped to [0, 1] and resized bilinearly to the image, blends COLOUR in
  with ALPHA. With `floor` the uniform weight 1 / P, a query that looks
  everywhere alike draws nothing and its peak draws at full strength.

  Args:
    image: uint8 [H, W, 3].
    weight_map_: float map of any size.
    scale: the weight drawn at full strength.
    floor: the weight drawn as nothing.

  Returns:
    uint8 [H, W, 3].
  """
  h, w = image.shape[:2]
  m = np.clip((weight_map_ - floor) / max(scale - floor, 1e-12), 0.0, 1.0)
  m = np.asarray(Image.fromarray(m.astype(np.float32), mode='F').resize((w, h), Image.BILINEAR),
                 np.float32)[..., None]
  out = image.astype(np.float32) * (1.0 - ALPHA * m) + COLOUR * (ALPHA * m)
  return np.clip(out, 0, 255).astype(np.uint8)


def draw_strip(step: AttentionStep, scales: Sequence[float], nethack: bool,
               gap: int = 4) -> np.ndarray:
  """One step as a strip: the screen, then each query's weights laid on it
  (above the uniform weight 1 / P; `overlay`).

  Args:
    step: the step.
    scales: per query, the weight drawn at full strength (one scale for the
      whole episode, so frames compare).
    nethack: the NetHack grid.
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
    (scales, rows): scales[q] is query q's largest weight over the steps;
    rows[k] holds 'step' and per query its 'entropy' (nats; uniform over
    the P positions is log P), 'peak' (its largest weight) and 'argmax'
    ([row, column] of the grid).
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
