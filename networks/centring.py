"""Frame centring: each task's running per-pixel mean frame, subtracted from
its frames before the first layer.

Why: an Atari screen is mostly a fixed background (on Pong 74% of pixels
never change over a batch, and the mean pixel is 0.42 after / 255). Fed
raw, every first-layer unit sees almost the same input in every state: its
weight gradients share a sign, Adam moves them all by about the learning
rate together, and the unit's output drifts as one, in every state alike.
Half of the units end up dead for every input and the rest nearly
constant, all the way to the policy head, whose logits then move together:
the policy collapses or stays blind (docs/pong.md). With the background
subtracted, a unit's input is what changes between states.

The statistics are the torso's parameters `frame_centre` {'mean': [K, H, W]
(pixel units, 0-255), 'count': [K]}, one row per task, so they travel with
the params to the actors, checkpoints and evaluation. The network stops
their gradient (the optimiser's step for them is then 0); the learner sets
them with `update` from each batch it trains on, before its gradient steps.
"""

from typing import Optional

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

NAME = 'frame_centre'
# The mean is the plain average of every frame seen until a batch would
# weigh less than this; from then on an exponential average that gives
# each batch this weight (about the last 1,000 updates).
MIN_WEIGHT = 1e-3


class FrameCentre(nn.Module):
  """The per-task mean frames [K, H, W] (no gradient): the learner's `update` sets them."""
  num_tasks: int
  frame_shape: tuple   # (H, W)

  @nn.compact
  def __call__(self):
    mean = self.param('mean', nn.initializers.zeros_init(), (self.num_tasks,) + tuple(self.frame_shape))
    self.param('count', nn.initializers.zeros_init(), (self.num_tasks,))
    return jax.lax.stop_gradient(mean)


def centred_frames(frames, task_id, centres):
  """frames uint8 [N, C, H, W] / 255, each minus its task's mean frame:
  float32 [N, C, H, W]. The plain convolutions' input (the fused Nature CNN
  takes the centres itself)."""
  return (frames.astype(jnp.float32) - centres[task_id][:, None]) / 255.0


def _find(params) -> Optional[tuple]:
  """The path of the frame_centre entry in params, or None."""
  flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(params))
  paths = {path[:-1] for path in flat if len(path) > 1 and path[-2] == NAME}
  return next(iter(paths)) if paths else None


def update(params, frames, task_id, axis_name: Optional[str] = None):
  """Params with each task's mean frame moved towards the batch's.

  frames uint8 [T, B, C, H, W] (the newest frame of each stack, channel -1,
  is counted: every frame enters a stack newest first), task_id [T, B].
  Per task k with n_k frames in the (global) batch: w = max(n_k / (count_k
  + n_k), MIN_WEIGHT), mean_k += w (batch mean_k - mean_k), count_k += n_k;
  a task absent from the batch keeps its row. Params without a frame
  centre come back unchanged.
  """
  path = _find(params)
  if path is None:
    return params
  flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(params))
  mean, count = flat[path + ('mean',)], flat[path + ('count',)]
  newest = frames[:, :, -1].astype(jnp.float32)                      # [T, B, H, W]
  one_hot = jax.nn.one_hot(task_id, mean.shape[0], dtype=jnp.float32)  # [T, B, K]
  sums = jnp.einsum('tbk,tbhw->khw', one_hot, newest)
  n = jnp.sum(one_hot, axis=(0, 1))
  if axis_name is not None:
    sums, n = jax.lax.psum((sums, n), axis_name)
  batch_mean = sums / jnp.maximum(n, 1.0)[:, None, None]
  weight = jnp.where(n > 0, jnp.maximum(n / jnp.maximum(count + n, 1.0), MIN_WEIGHT), 0.0)
  flat[path + ('mean',)] = mean + weight[:, None, None] * (batch_mean - mean)
  flat[path + ('count',)] = count + n
  return flax.traverse_util.unflatten_dict(flat)
