"""`Conv2D`: a drop-in for `flax.linen.Conv` (2-D, NHWC) that is fast on XLA:CPU, whose own
convolutions (their gradients above all) run far below its matmul rate (docs/speed.md).

A convolution is an explicit im2col + one matmul, forward and backward. Stride s becomes a stride-1
conv with a ceil(k/s) kernel by space-to-depth. The batch goes through in chunks (`lax.scan`) so
each chunk's patch matrix stays in cache; the backward pass recomputes patches per chunk rather than
saving them. Parameters are nn.Conv's, so checkpoints see an ordinary conv.
"""

import functools
from typing import Any, Callable, Sequence, Union

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from networks import kernels as kernels_lib

# Patch-matrix bytes per chunk, so that a chunk's patches stay in cache.
_CHUNK_BYTES = 4 << 20

PaddingLike = Union[str, Sequence[tuple[int, int]]]


def _pads(padding, size, kernel, strides):
  if isinstance(padding, str):
    if padding == 'VALID':
      return ((0, 0), (0, 0))
    if padding != 'SAME':
      raise ValueError(f'Conv2D supports VALID, SAME or explicit pads, got {padding!r}')
    pads = []
    for n, k, s in zip(size, kernel, strides):
      total = max((-(-n // s) - 1) * s + k - n, 0)  # lax's SAME: extra pad at the end
      pads.append((total // 2, total - total // 2))
    return tuple(pads)
  return tuple((int(lo), int(hi)) for lo, hi in padding)


def _geometry(x_shape, w_shape, strides, pads):
  """Per spatial dim: (input, kernel, stride, pad_lo, out, kernel_in_blocks, blocks)."""
  dims = []
  for n, k, s, (lo, hi) in zip(x_shape[1:3], w_shape[:2], strides, pads):
    out = (n + lo + hi - k) // s + 1
    kb = -(-k // s)
    dims.append((n, k, s, lo, out, kb, out + kb - 1))
  return dims


def _space_to_depth(x, geo):
  """[B, H, W, C] -> [B, nh, nw, sh * sw * C]: padded, stride blocks as channels."""
  (h, _, sh, loh, _, _, nh), (w, _, sw, low, _, _, nw) = geo
  # Pad (or crop) to exactly nh x nw whole stride blocks; the extra rows only
  # ever meet the zero taps that _kernel_matrix pads the kernel with.
  x = lax.pad(x, jnp.zeros((), x.dtype),
              ((0, 0, 0), (loh, nh * sh - h - loh, 0), (low, nw * sw - w - low, 0), (0, 0, 0)))
  if sh > 1 or sw > 1:
    b, c = x.shape[0], x.shape[-1]
    x = x.reshape(b, nh, sh, nw, sw, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, nh, nw, sh * sw * c)
  return x


def _patches(x, geo):
  """[B, H, W, C] -> [B, oh, ow, kbh * kbw * sh * sw * C] (im2col after space-to-depth)."""
  (_, _, _, _, oh, kbh, _), (_, _, _, _, ow, kbw, _) = geo
  x = _space_to_depth(x, geo)
  if kbh * kbw == 1:
    return x
  return jnp.concatenate(
      [x[:, i:i + oh, j:j + ow] for i in range(kbh) for j in range(kbw)], axis=-1)


def _kernel_matrix(kernel, geo):
  """[kh, kw, C, O] -> [kbh * kbw * sh * sw * C, O], rows ordered as _patches' features."""
  (_, kh, sh, _, _, kbh, _), (_, kw, sw, _, _, kbw, _) = geo
  c, o = kernel.shape[2:]
  kernel = jnp.pad(kernel, ((0, kbh * sh - kh), (0, kbw * sw - kw), (0, 0), (0, 0)))
  kernel = kernel.reshape(kbh, sh, kbw, sw, c, o).transpose(0, 2, 1, 3, 4, 5)
  return kernel.reshape(-1, o)


def _chunked(body, carry, xs, floats_per_sample):
  """Maps body(carry, chunk_of_xs) -> (carry, out) over batch chunks of ~_CHUNK_BYTES."""
  batch = xs[0].shape[0]
  n = max(1, min(batch, -(-batch * floats_per_sample * 4 // _CHUNK_BYTES)))
  if n == 1:
    return body(carry, xs)
  # Prefer a chunk count that divides the batch (up to 2x smaller chunks);
  # else zero-pad to whole chunks: zero inputs and cotangents add nothing.
  n = next((m for m in range(n, min(2 * n, batch) + 1) if batch % m == 0), n)
  size = -(-batch // n)
  n = -(-batch // size)
  xs = [jnp.pad(a, ((0, n * size - batch),) + ((0, 0),) * (a.ndim - 1)) for a in xs]
  xs = [a.reshape((n, size) + a.shape[1:]) for a in xs]
  carry, out = lax.scan(body, carry, xs)
  return carry, out.reshape((n * size,) + out.shape[2:])[:batch]


def _kn2row(x, kernel, bias, geo):
  """The convolution with shifts on the output side: one matmul of the space-to-depth input against
  all taps, then a shifted sum; no patch matrix, so it beats im2col for small acting batches."""
  (_, _, _, _, oh, kbh, _), (_, _, _, _, ow, kbw, _) = geo
  xs = _space_to_depth(x, geo)
  o = kernel.shape[-1]
  wm = _kernel_matrix(kernel, geo).reshape(kbh, kbw, xs.shape[-1], o)
  z = xs @ wm.transpose(2, 0, 1, 3).reshape(xs.shape[-1], kbh * kbw * o)
  z = z.reshape(z.shape[:3] + (kbh, kbw, o))
  y = bias
  for i in range(kbh):
    for j in range(kbw):
      y = y + z[:, i:i + oh, j:j + ow, i, j]
  return y


# Batches up to this size use _kn2row when no gradient is taken (acting).
_KN2ROW_MAX_BATCH = 64


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def conv2d(x, kernel, bias, strides, pads):
  """A 2-D convolution plus bias with a gradient written for XLA:CPU.

  Equals lax.conv_general_dilated(x, kernel, strides, pads, NHWC/HWIO) + bias up to float summation
  order; under differentiation both passes take the chunked im2col path.

  Args:
    x: [N, H, W, C].
    kernel: [kh, kw, C, O].
    pads: ((lo, hi), (lo, hi)) for H and W.

  Returns:
    [N, oh, ow, O] in the inputs' dtype.
  """
  if tuple(strides) == (1, 1):
    return lax.conv_general_dilated(x, kernel, strides, pads,
                                    dimension_numbers=('NHWC', 'HWIO', 'NHWC')) + bias
  if x.shape[0] <= _KN2ROW_MAX_BATCH:
    return _kn2row(x, kernel, bias, _geometry(x.shape, kernel.shape, strides, pads))
  return _conv_fwd(x, kernel, bias, strides, pads)[0]


def _floats_per_sample(geo, wm):
  return geo[0][4] * geo[1][4] * wm.shape[0]


def _conv_fwd(x, kernel, bias, strides, pads):
  geo = _geometry(x.shape, kernel.shape, strides, pads)
  wm = _kernel_matrix(kernel, geo)
  # The bias is added inside the loop so that it costs no extra pass over y.
  _, y = _chunked(lambda c, xs: (c, _patches(xs[0], geo) @ wm + bias), None, [x],
                  _floats_per_sample(geo, wm))
  return y, (x, kernel)


def _conv_bwd(strides, pads, res, dy):
  x, kernel = res
  geo = _geometry(x.shape, kernel.shape, strides, pads)
  wm, kernel_matrix_t = jax.vjp(lambda k: _kernel_matrix(k, geo), kernel)

  def body(acc, xs):
    xc, dyc = xs
    p, patches_t = jax.vjp(lambda v: _patches(v, geo), xc)
    # dW^T = dy^T @ p: XLA transposes the thin dy rather than the wide patches.
    dwm = acc[0] + lax.dot_general(dyc, p, (((0, 1, 2), (0, 1, 2)), ((), ())))
    (dxc,) = patches_t(dyc @ wm.T)  # unused for a first layer: XLA drops it
    return (dwm, acc[1] + dyc.sum((0, 1, 2))), dxc

  init = (jnp.zeros_like(wm.T), jnp.zeros(dy.shape[-1], dy.dtype))
  (dwm, db), dx = _chunked(body, init, [x, dy], _floats_per_sample(geo, wm))
  return dx, kernel_matrix_t(dwm.T)[0], db


conv2d.defvjp(_conv_fwd, _conv_bwd)


def xla_conv2d(x, kernel, bias, strides, pads):
  """`conv2d` as XLA's own op: what accelerators run."""
  return lax.conv_general_dilated(x, kernel, strides, pads,
                                  dimension_numbers=('NHWC', 'HWIO', 'NHWC')) + bias


class Conv2D(nn.Module):
  """2-D convolution over the last three axes (H, W, C), with nn.Conv's
  parameters ('kernel' [kh, kw, cin, features], 'bias') and initialisers.

  Attributes:
    padding: 'VALID', 'SAME' (lax's: the extra pad at the end) or explicit ((lo, hi), (lo, hi)).
    dtype: the computation dtype (inputs and parameters are promoted to it).
  """
  features: int
  kernel_size: Sequence[int]
  strides: Union[int, Sequence[int]] = (1, 1)
  padding: PaddingLike = 'VALID'
  use_bias: bool = True
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32
  kernel_init: Callable = nn.initializers.lecun_normal()
  bias_init: Callable = nn.initializers.zeros_init()
  kernels: str = 'auto'   # networks/kernels.py: 'auto', 'cpu' (conv2d) or 'xla' (xla_conv2d)

  @nn.compact
  def __call__(self, x):
    """[..., H, W, C] -> [..., oh, ow, features] in `dtype`; any leading dims.

    Raises:
      ValueError: kernel_size is not 2-D, or an unsupported padding string.
    """
    kernel_size = tuple(self.kernel_size)
    if len(kernel_size) != 2:
      raise ValueError(f'Conv2D needs a 2-D kernel_size, got {self.kernel_size}')
    strides = (self.strides,) * 2 if isinstance(self.strides, int) else tuple(self.strides)
    kernel = self.param('kernel', self.kernel_init, kernel_size + (x.shape[-1], self.features),
                        self.param_dtype)
    bias = (self.param('bias', self.bias_init, (self.features,), self.param_dtype)
            if self.use_bias else None)
    x, kernel, bias = nn.dtypes.promote_dtype(x, kernel, bias, dtype=self.dtype)
    lead = x.shape[:-3]
    x = x.reshape((-1,) + x.shape[-3:])
    if bias is None:
      bias = jnp.zeros((self.features,), x.dtype)
    pads = _pads(self.padding, x.shape[1:3], kernel_size, strides)
    y = kernels_lib.select(self.kernels, lambda *a: conv2d(*a, strides, pads),
                           lambda *a: xla_conv2d(*a, strides, pads), x, kernel, bias)
    return y.reshape(lead + y.shape[1:])
