"""Max-pooling written for a fast gradient on XLA:CPU (IMPALA ResNet, NetHack attention torso)."""

import functools

import flax.linen as nn
import jax.numpy as jnp

from networks import kernels as kernels_lib


def max_pool_3x3_s2(x, kernels: str = 'auto'):
  """nn.max_pool(x, (3, 3), (2, 2), 'SAME') on NHWC [..., H, W, C], as `kernels` says."""
  return kernels_lib.select(kernels, sliced_max_pool,
                            lambda x: nn.max_pool(x, (3, 3), (2, 2), 'SAME'), x)


def sliced_max_pool(x):
  """nn.max_pool(x, (3, 3), (2, 2), 'SAME') on NHWC, as maxima of strided slices.

  XLA:CPU's reduce_window backward (select_and_scatter) is very slow; maxima of slices of the
  -inf-padded input differentiate into selects and pads. The window is taken separably (3 column
  slices, then 3 row slices), which differentiates faster than 9 slices.
  """
  def pads(n):  # lax's SAME padding: out = ceil(n / 2), the odd pixel at the end
    out = -(-n // 2)
    total = 2 * (out - 1) + 3 - n
    return out, (total // 2, total - total // 2)

  (oh, ph), (ow, pw) = pads(x.shape[-3]), pads(x.shape[-2])
  x = jnp.pad(x, ((0, 0),) * (x.ndim - 3) + (ph, pw, (0, 0)), constant_values=-jnp.inf)
  x = functools.reduce(jnp.maximum, [x[..., j:j + 2 * ow - 1:2, :] for j in range(3)])
  return functools.reduce(jnp.maximum, [x[..., i:i + 2 * oh - 1:2, :, :] for i in range(3)])
