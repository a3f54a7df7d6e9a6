"""`nature_convs`: the Nature CNN's three convolutions (Mnih et al. 2015; uint8 [N, 4, 84, 84] ->
/255 -> 32 8x8/4 -> relu -> 64 4x4/2 -> relu -> 64 3x3/1 -> relu) as one custom-VJP op that is fast
to differentiate on XLA:CPU, where per-layer convs spend their time moving data (docs/speed.md).

* Chunks of _CHUNK frames (lax.scan) keep every intermediate in cache; the uint8 space-to-depth by 4
  moves one uint32 per 4 pixels and converts to float in cache, 1/255 folded into conv1's weights.
* conv1 and conv2 are kn2row (one matmul against all taps, then a shifted sum: no patch matrix);
  conv1's output is laid out as conv2's space-to-depth input. conv3 (stride 1) is im2col.
* The forward saves conv1's and conv2's outputs; the backward re-reads them and never recomputes a
  conv. conv1's input gradient is never formed.
* The health maxima are taken per chunk; frame centring subtracts each stack's task mean frame where
  conv1's input is converted.

Parameters are the plain layers'. Only uint8 [N, 4, 84, 84] frames take this path (`supported`).
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax

# Frames per chunk: small enough to stay in cache, large enough for efficient
# matmuls. A remainder runs as one more chunk outside the scan.
_CHUNK = 16

# Output sizes: conv1 20x20x32 (as 10x10 blocks of 2x2x32), conv2 9x9x64, conv3 7x7x64.
_H1, _H2, _H3 = 20, 9, 7

_relu = jax.nn.relu


def supported(frames) -> bool:
  return frames.dtype == jnp.uint8 and frames.ndim == 4 and tuple(frames.shape[1:]) == (4, 84, 84)


# ---- Layouts and weight matrices.

def _s2d4(frames):
  """uint8 [c, 4, 84, 84] -> float32 [c 441, 64]: rows (n, H, W) of the 21x21 grid of 4x4 blocks,
  features (channel, row, column in block). A block row's four bytes travel as one uint32."""
  c = frames.shape[0]
  w = lax.bitcast_convert_type(frames.reshape(c, 4, 84, 21, 4), jnp.uint32)
  w = w.reshape(c, 4, 21, 4, 21).transpose(0, 2, 4, 1, 3)
  return lax.bitcast_convert_type(w, jnp.uint8).reshape(c * 441, 64).astype(jnp.float32)


def _s2d4_centres(centres):
  """float [K, 84, 84] -> [K, 441, 64]: each task's mean frame, repeated for
  the 4 frames of a stack, in _s2d4's layout."""
  k = centres.shape[0]
  stack = jnp.broadcast_to(centres[:, None], (k, 4, 84, 84))
  return stack.reshape(k, 4, 21, 4, 21, 4).transpose(0, 2, 4, 1, 3, 5).reshape(k, 441, 64)


def _conv1_input(frames, task, centres):
  """conv1's input in _s2d4's layout [c 441, 64]; with `centres` ([K, 441,
  64], _s2d4_centres) each frame stack minus its task's mean frame."""
  x = _s2d4(frames)
  if centres is None:
    return x
  c = frames.shape[0]
  return (x.reshape(c, 441, 64) - centres[task]).reshape(c * 441, 64)


def _w1(k1):
  """[8, 8, 4, 32] -> [64 (ch, ph, pw), 4 taps (di, dj) x 32], 1/255 folded in."""
  return (k1.reshape(2, 4, 2, 4, 4, 32).transpose(4, 1, 3, 0, 2, 5) / 255.0).reshape(64, 128)


def _w2(k2):
  """[4, 4, 32, 64] -> [128 (p, q, ci), 4 taps (ti, tj) x 64] (kn2row)."""
  return k2.reshape(2, 2, 2, 2, 32, 64).transpose(1, 3, 4, 0, 2, 5).reshape(128, 256)


def _w2_patches(k2):
  """[4, 4, 32, 64] -> [512 (ti, tj, p, q, ci), 64] (im2col)."""
  return k2.reshape(2, 2, 2, 2, 32, 64).transpose(0, 2, 1, 3, 4, 5).reshape(512, 64)


def _patches(x, k):
  """[c, H, W, C] -> [c, H-k+1, W-k+1, k k C]: the kxk windows, taps major."""
  h, w = x.shape[1] - k + 1, x.shape[2] - k + 1
  return jnp.concatenate([x[:, i:i + h, j:j + w] for i in range(k) for j in range(k)], -1)


def _shift_sum(z, k, h, bias):
  """z [c, H, W, k k, O] -> relu(bias + sum over taps (i, j) of z[:, i:i+h, j:j+h, tap])."""
  return _relu(sum(z[:, i:i + h, j:j + h, k * i + j] for i in range(k) for j in range(k)) + bias)


def _unblock(m1):
  """conv1's [..., 10, 10, 2, 2 x 32] block layout -> [..., 20, 20, 32]."""
  lead = m1.shape[:-3]
  m1 = m1.reshape(lead + (10, 10, 2, 2, 32))
  n = len(lead)
  m1 = m1.transpose(tuple(range(n)) + (n, n + 2, n + 1, n + 3, n + 4))
  return m1.reshape(lead + (_H1, _H1, 32))


# ---- One chunk, forward and backward.

def _fwd_chunk(frames, task, centres, w1, b1, w2, b2, w3, b3):
  """uint8 [c, 4, 84, 84] (tasks [c]) -> conv1 (block layout [c, 10, 10, 128]),
  conv2 [c, 9, 9, 64], conv3 [c, 7, 7, 64], all after relu."""
  c = frames.shape[0]
  z1 = (_conv1_input(frames, task, centres) @ w1).reshape(c, 21, 21, 4, 32)
  y1 = _shift_sum(z1, 2, _H1, b1)
  y1 = y1.reshape(c, 10, 2, 10, 2, 32).transpose(0, 1, 3, 2, 4, 5).reshape(c, 10, 10, 128)
  z2 = (y1.reshape(c * 100, 128) @ w2).reshape(c, 10, 10, 4, 64)
  y2 = _shift_sum(z2, 2, _H2, b2)
  y3 = _relu(_patches(y2, 3).reshape(c * 49, 576) @ w3 + b3).reshape(c, _H3, _H3, 64)
  return y1, y2, y3


def _bwd_chunk(frames, task, y1, y2, y3, dy3, centres, w2p, w3):
  """Gradients of one chunk: (dW1 as [64, 128] (_w1's layout), db1, dW2 as
  [64, 512] (_w2_patches' transpose), db2, dW3 as [64, 576], db3)."""
  c = frames.shape[0]
  dz3 = (dy3 * (y3 > 0)).reshape(c * 49, 64)
  g3 = dz3.T @ _patches(y2, 3).reshape(c * 49, 576)
  dp3 = (dz3 @ w3.T).reshape(c, 7, 7, 3, 3, 64)                # col2im
  dy2 = sum(jnp.pad(dp3[:, :, :, i, j], ((0, 0), (i, 2 - i), (j, 2 - j), (0, 0)))
            for i in range(3) for j in range(3))
  dz2 = (dy2 * (y2 > 0)).reshape(c * 81, 64)
  g2 = dz2.T @ _patches(y1, 2).reshape(c * 81, 512)
  dp2 = (dz2 @ w2p.T).reshape(c, 9, 9, 2, 2, 128)
  dy1 = sum(jnp.pad(dp2[:, :, :, i, j], ((0, 0), (i, 1 - i), (j, 1 - j), (0, 0)))
            for i in range(2) for j in range(2))
  dz1 = dy1 * (y1 > 0)
  db1 = dz1.reshape(-1, 4, 32).sum((0, 1))
  dz1 = dz1.reshape(c, 10, 10, 2, 2, 32).transpose(0, 1, 3, 2, 4, 5).reshape(c, _H1, _H1, 32)
  # G: dz1 shifted by each of conv1's 4 taps onto the 21x21 input grid.
  g = jnp.stack([jnp.pad(dz1, ((0, 0), (i, 1 - i), (j, 1 - j), (0, 0)))
                 for i in range(2) for j in range(2)], 3).reshape(c * 441, 128)
  g1 = lax.dot_general(_conv1_input(frames, task, centres), g, (((0,), (0,)), ((), ())))
  return g1, db1, g2, dz2.sum(0), g3, dz3.sum(0)


# ---- The batch: chunks in a scan, the remainder as one more chunk.

def _split(n):
  k = n // _CHUNK
  return k, n - k * _CHUNK


def _chunked(a, k):
  return a[:k * _CHUNK].reshape((k, _CHUNK) + a.shape[1:])


def _maxima(y1, y2, y3):
  return y1.max(0), y2.max(0), y3.max(0)


def _forward(frames, task, centres, k1, b1, k2, b2, k3, b3, keep):
  """Runs the chunks; returns the saved activations (if keep) or just conv3's,
  and the health maxima. `centres`: _s2d4_centres' layout, or None."""
  w1, w2, w3 = _w1(k1), _w2(k2), k3.reshape(576, 64)
  k, r = _split(frames.shape[0])
  outs, maxima = [], []
  if k:
    def body(m, ft):
      ys = _fwd_chunk(*ft, centres, w1, b1, w2, b2, w3, b3)
      return tuple(map(jnp.maximum, m, _maxima(*ys))), (ys if keep else ys[2:])
    init = (jnp.zeros((10, 10, 128)), jnp.zeros((_H2, _H2, 64)), jnp.zeros((_H3, _H3, 64)))
    m, ys = lax.scan(body, init, (_chunked(frames, k), _chunked(task, k)))
    outs.append([y.reshape((-1,) + y.shape[2:]) for y in ys])
    maxima.append(m)
  if r:
    ys = _fwd_chunk(frames[k * _CHUNK:], task[k * _CHUNK:], centres, w1, b1, w2, b2, w3, b3)
    outs.append(ys if keep else ys[2:])
    maxima.append(_maxima(*ys))
  ys = [jnp.concatenate(a) if len(a) > 1 else a[0] for a in zip(*outs)]
  m1, m2, m3 = functools.reduce(lambda a, b: tuple(map(jnp.maximum, a, b)), maxima)
  return ys, (_unblock(m1), m2, m3)


def nature_convs(frames, k1, b1, k2, b2, k3, b3, task_id=None, centres=None):
  """The Nature CNN's three convolutions as one op written for XLA:CPU.

  Equals three VALID relu convs (NHWC) on frames / 255 (with `centres`, (frames - centres[task_id])
  / 255) up to float summation order; float32. Only kernels and biases get gradients.

  Args:
    frames: uint8 [N, 4, 84, 84].
    k1, b1, k2, b2, k3, b3: kernels [8, 8, 4, 32] /4, [4, 4, 32, 64] /2, [3, 3, 64, 64] /1, biases.
    task_id: int [N], with `centres` ([K, 84, 84], pixel units).

  Returns:
    (conv3's output float32 [N, 7, 7, 64], the per-unit maxima over the batch
    of the three relu outputs: [20, 20, 32], [9, 9, 64], [7, 7, 64]).
  """
  if centres is None:
    return _convs(frames, jnp.zeros(frames.shape[:1], jnp.int32), False,
                  jnp.zeros((1, 84, 84), jnp.float32), k1, b1, k2, b2, k3, b3)
  return _convs(frames, task_id.astype(jnp.int32), True, jax.lax.stop_gradient(centres),
                k1, b1, k2, b2, k3, b3)


def xla_convs(frames, k1, b1, k2, b2, k3, b3, task_id=None, centres=None, dtype=jnp.float32):
  """`nature_convs`' function as three XLA convolutions computed in `dtype`, for frames uint8
  [N, C, H, W]: what accelerators run. The maxima are float32 and stopped from gradients."""
  if centres is None:
    x = frames.astype(jnp.float32) / 255.0
  else:
    stack = jax.lax.stop_gradient(centres)[task_id.astype(jnp.int32)][:, None]
    x = (frames.astype(jnp.float32) - stack) / 255.0
  x = jnp.transpose(x, (0, 2, 3, 1)).astype(dtype)
  ys = []
  for kernel, bias, stride in ((k1, b1, 4), (k2, b2, 2), (k3, b3, 1)):
    x = _relu(lax.conv_general_dilated(x, kernel.astype(dtype), (stride, stride), 'VALID',
                                       dimension_numbers=('NHWC', 'HWIO', 'NHWC'))
              + bias.astype(dtype))
    ys.append(x)
  return x, tuple(jax.lax.stop_gradient(y.max(0)).astype(jnp.float32) for y in ys)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _convs(frames, task, centred, centres, k1, b1, k2, b2, k3, b3):
  layout = _s2d4_centres(centres) if centred else None
  (y3,), maxima = _forward(frames, task, layout, k1, b1, k2, b2, k3, b3, keep=False)
  return y3, maxima


def _vjp_fwd(frames, task, centred, centres, k1, b1, k2, b2, k3, b3):
  layout = _s2d4_centres(centres) if centred else None
  (y1, y2, y3), maxima = _forward(frames, task, layout, k1, b1, k2, b2, k3, b3, keep=True)
  return (y3, maxima), (frames, task, centres, y1, y2, y3, k1, k2, k3)


def _vjp_bwd(centred, res, cotangents):
  frames, task, centres, y1, y2, y3, k1, k2, k3 = res
  dy3 = cotangents[0]   # the maxima are health statistics: no gradient
  w2p, w3 = _w2_patches(k2), k3.reshape(576, 64)
  layout = _s2d4_centres(centres) if centred else None
  k, r = _split(frames.shape[0])
  args = (frames, task, y1, y2, y3, dy3)
  grads = []
  if k:
    def body(acc, a):
      return tuple(map(jnp.add, acc, _bwd_chunk(*a, layout, w2p, w3))), None
    init = tuple(jnp.zeros(s, jnp.float32) for s in ((64, 128), (32,), (64, 512), (64,), (64, 576), (64,)))
    grads.append(lax.scan(body, init, [_chunked(a, k) for a in args])[0])
  if r:
    grads.append(_bwd_chunk(*[a[k * _CHUNK:] for a in args], layout, w2p, w3))
  g1, db1, g2, db2, g3, db3 = functools.reduce(lambda a, b: tuple(map(jnp.add, a, b)), grads)
  dk1 = jax.vjp(_w1, k1)[1](g1)[0]
  dk2 = jax.vjp(_w2_patches, k2)[1](g2.T)[0]
  return (None, None, jnp.zeros_like(centres), dk1, db1, dk2, db2,
          g3.T.reshape(3, 3, 64, 64), db3)


_convs.defvjp(_vjp_fwd, _vjp_bwd)
