"""Frame centring: each task's running per-pixel mean frame, subtracted from
its frames before the first layer.

Purpose: an Atari screen is mostly a fixed background. Fed raw, every
first-layer unit sees almost the same input in every state: its weight
gradients share a sign, Adam moves them all by about the learning rate
together, and the unit's output drifts as one, in every state alike. Units
then end up dead for every input or nearly constant, all the way to the
policy head, whose logits move together: the policy collapses or stays
blind (docs/pong.md). With the background subtracted, a unit's input is
what changes between states.

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
  """The per-task mean frames [K, H, W] (no gradient): the learner's `update` sets them.

  Parameters: 'mean' [K, H, W] (pixel units, 0-255) and 'count' [K], both
  initialised to 0.

  Attributes:
    num_tasks: K.
    frame_shape: (H, W).
  """
  num_tasks: int
  frame_shape: tuple   # (H, W)

  @nn.compact
  def __call__(self):
    """Returns the mean frames [K, H, W], stopped from gradients."""
    mean = self.param('mean', nn.initializers.zeros_init(), (self.num_tasks,) + tuple(self.frame_shape))
    self.param('count', nn.initializers.zeros_init(), (self.num_tasks,))
    return jax.lax.stop_gradient(mean)


def centred_frames(frames, task_id, centres):
  """Frames centred on their task's mean frame, scaled to [0, 1] units.

  The plain convolutions' input (the fused Nature CNN takes the centres
  itself). Every channel of a frame stack has the same mean subtracted.

  Args:
    frames: uint8 [N, C, H, W].
    task_id: int [N], each frame's task.
    centres: the mean frames [K, H, W] in pixel units (FrameCentre).

  Returns:
    float32 [N, C, H, W]: (frames - centres[task_id]) / 255.
  """
  return (frames.astype(jnp.float32) - centres[task_id][:, None]) / 255.0


def _find(params) -> Optional[tuple]:
  """The path of the frame_centre entry in params, or None."""
  flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(params))
  paths = {path[:-1] for path in flat if len(path) > 1 and path[-2] == NAME}
  return next(iter(paths)) if paths else None


def update(params, frames, task_id, axis_name: Optional[str] = None):
  """Params with each task's mean frame moved towards the batch's.

  Only the newest frame of each stack (channel -1) is counted: every frame
  enters a stack newest first. Per task k with n_k frames in the (global)
  batch: w = max(n_k / (count_k + n_k), MIN_WEIGHT), mean_k += w (batch
  mean_k - mean_k), count_k += n_k; a task absent from the batch keeps its
  row. Sums and counts are summed over `axis_name`, so every device gets
  the same new means.

  Args:
    params: the network's params.
    frames: uint8 [T, B, C, H, W].
    task_id: int [T, B].
    axis_name: the devices the batch spans; None for one device.

  Returns:
    The params with the frame_centre entry's 'mean' and 'count' updated;
    params without a frame centre come back unchanged.
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
