"""Frame centring: each task's running per-pixel mean frame, subtracted from its frames before the
first layer, so a first-layer unit's input is what changes between states rather than a fixed
background that moves all its weights together (docs/pong.md).

The means are the torso's parameters `frame_centre` {'mean': [K, H, W]
(pixel units), 'count': [K]}, so they travel with the params; their gradient
is stopped and the learner sets them with `update` before its gradient steps.
"""

from typing import Optional

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

NAME = 'frame_centre'
# The mean is the plain average of every frame seen until a batch would weigh
# less than this, then an exponential average with this weight per batch.
MIN_WEIGHT = 1e-3


class FrameCentre(nn.Module):
  """The per-task mean frames [K, H, W] (no gradient), set by `update`."""
  num_tasks: int
  frame_shape: tuple   # (H, W)

  @nn.compact
  def __call__(self):
    mean = self.param('mean', nn.initializers.zeros_init(), (self.num_tasks,) + tuple(self.frame_shape))
    self.param('count', nn.initializers.zeros_init(), (self.num_tasks,))
    return jax.lax.stop_gradient(mean)


def centred_frames(frames, task_id, centres):
  """(frames - centres[task_id]) / 255, float32 [N, C, H, W], for uint8 frames [N, C, H, W] and mean
  frames [K, H, W]; every channel of a stack gets the same mean."""
  return (frames.astype(jnp.float32) - centres[task_id][:, None]) / 255.0


def _find(params) -> Optional[tuple]:
  """The path of the frame_centre entry in params, or None."""
  flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(params))
  paths = {path[:-1] for path in flat if len(path) > 1 and path[-2] == NAME}
  return next(iter(paths)) if paths else None


def update(params, frames, task_id, axis_name: Optional[str] = None):
  """Params with each task's mean frame moved towards the batch's.

  Only each stack's newest frame (channel -1) counts: every frame enters a stack newest first. Per
  task k with n_k frames in the global batch: w = max(n_k / (count_k + n_k), MIN_WEIGHT), mean_k +=
  w (batch mean_k - mean_k), count_k += n_k; absent tasks keep their row. Params without a frame
  centre come back unchanged.

  Args:
    frames: uint8 [T, B, C, H, W].
    task_id: int [T, B].
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
