"""`nature_convs`: the Nature CNN's three convolutions (Mnih et al. 2015;
uint8 frames [N, 4, 84, 84] -> /255 -> 32 8x8/4 -> relu -> 64 4x4/2 -> relu
-> 64 3x3/1 -> relu), as one custom-VJP op that is fast to differentiate on
XLA:CPU.

With one `Conv2D` (networks/conv.py) per layer, most of the learner's torso
time is data movement rather than matmuls: XLA:CPU emits every slice that
feeds a concatenate as its own kernel (the im2col patches are written
twice), duplicates elementwise producers into each consumer, and transposing
fusions are slow. So here:

* Frames are never converted as a whole batch. Per chunk of _CHUNK frames,
  the uint8 space-to-depth by 4 ([c, 21, 21, 64]) moves 4-byte words (one
  uint32 per 4 pixels of a block row) and is converted to float in cache.
  The 1/255 is folded into conv1's weights.
* conv1 and conv2 forward are "kn2row": one matmul of the (space-to-depth)
  input against all kernel taps at once, [c 441, 64] @ [64, 4 x 32] and
  [c 100, 128] @ [128, 4 x 64], then a shifted sum of 4 slices (+ bias,
  relu). No patch matrix is written. conv1's output is laid out as conv2's
  space-to-depth input ([c, 10, 10, 2 x 2 x 32]), conv2 reads it once.
  conv3 (stride 1, 7x7 output) uses im2col ([c 49, 576] @ [576, 64]):
  kn2row would compute 81 positions for 49.
* The forward saves conv1's and conv2's outputs (51 + 21 KB a frame); the
  backward re-reads them, never recomputes a conv:
  - dW: dz^T @ patches for conv2 and conv3 (patches rebuilt from the saved
    activations), and for conv1 input^T @ G, where G [c 441, 4 x 32] holds
    dz shifted by each tap (the transpose of kn2row). The input is
    re-derived from the uint8 frames.
  - input gradients of conv3 and conv2 as col2im: dz @ W^T, then a sum of
    shifted (padded) slices. conv1's is never formed.
* Batches go through in chunks of _CHUNK frames (lax.scan), so that each
  chunk's intermediates (~4 MB for conv1's matmul output) stay in cache.
* The health maxima (per-unit max over the batch of each post-relu
  activation) are taken per chunk, in cache, and returned beside the
  output.
* Frame centring (networks/centring.py): with `centres` each frame stack's
  task mean frame, in the space-to-depth layout, is subtracted from the
  chunk's conv1 input where it is converted to float, in cache; the
  backward's dW1 reads the same centred input.

Parameters are the plain layers' (conv kernels [kh, kw, cin, cout], biases
[cout]); the math is the plain network's, up to float summation order
(tests/unit/test_nature_cnn.py). Only [N, 4, 84, 84] uint8 frames take this
path (`supported`); the torso falls back to `Conv2D` for anything else.
`xla_convs` is the same function as three XLA convolutions: what the torso
runs where networks/kernels.py does not choose the CPU ops (accelerators).
(measurements and the alternatives measured: docs/speed.md; its profiles:
the page's git history)
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax

# Frames per chunk: small enough that a chunk's data movement stays in cache,
# large enough for efficient matmuls (measurements: docs/speed.md). A batch
# that is not a multiple runs its remainder as one more (smaller) chunk,
# outside the scan.
_CHUNK = 16

# Output sizes: conv1 20x20x32 (as 10x10 blocks of 2x2x32), conv2 9x9x64,
# conv3 7x7x64.
_H1, _H2, _H3 = 20, 9, 7

_relu = jax.nn.relu


def supported(frames) -> bool:
  """Whether `nature_convs` takes these frames (else use plain convs).

  Args:
    frames: the torso's frames.

  Returns:
    True for uint8 frames [N, 4, 84, 84].
  """
  return frames.dtype == jnp.uint8 and frames.ndim == 4 and tuple(frames.shape[1:]) == (4, 84, 84)


# ---- Layouts and weight matrices.

def _s2d4(frames):
  """uint8 [c, 4, 84, 84] -> float32 [c 441, 64]: rows (n, H, W) over the 21x21
  grid of 4x4 pixel blocks, features (channel, row in block, column in block).
  The four bytes of a block row travel as one uint32."""
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

  Equals the plain network (three VALID convs with relu, NHWC) on frames /
  255, up to float summation order; with `centres` and `task_id`, on
  (frames - centres[task_id]) / 255 (networks/centring.py). Computes in
  float32. Gradients flow to the kernels and biases only: none to the
  frames, the centres or the maxima.

  Args:
    frames: uint8 [N, 4, 84, 84] (`supported`).
    k1: conv1's kernel [8, 8, 4, 32] (stride 4).
    b1: conv1's bias [32].
    k2: conv2's kernel [4, 4, 32, 64] (stride 2).
    b2: conv2's bias [64].
    k3: conv3's kernel [3, 3, 64, 64] (stride 1).
    b3: conv3's bias [64].
    task_id: int [N], each frame stack's task; with `centres`.
    centres: the tasks' mean frames [K, 84, 84] in pixel units, or None.

  Returns:
    (conv3's relu output float32 [N, 7, 7, 64], the per-unit maxima over
    the batch of the three relu outputs: [20, 20, 32], [9, 9, 64],
    [7, 7, 64]).
  """
  if centres is None:
    return _convs(frames, jnp.zeros(frames.shape[:1], jnp.int32), False,
                  jnp.zeros((1, 84, 84), jnp.float32), k1, b1, k2, b2, k3, b3)
  return _convs(frames, task_id.astype(jnp.int32), True, jax.lax.stop_gradient(centres),
                k1, b1, k2, b2, k3, b3)


def xla_convs(frames, k1, b1, k2, b2, k3, b3, task_id=None, centres=None, dtype=jnp.float32):
  """`nature_convs`' function and outputs, as three XLA convolutions.

  Runs on frames / 255 (centred as there), NHWC, computed in `dtype`: what
  accelerators run.

  Args:
    frames: uint8 [N, C, H, W].
    k1, b1, k2, b2, k3, b3: the three layers' kernels [kh, kw, cin, cout]
      and biases [cout] (strides 4, 2, 1).
    task_id: int [N], each frame stack's task; with `centres`.
    centres: the tasks' mean frames [K, H, W] in pixel units (stopped from
      gradients), or None.
    dtype: the computation dtype.

  Returns:
    (conv3's relu output in `dtype`, the per-unit maxima over the batch of
    the three relu outputs, float32, stopped from gradients).
  """
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
