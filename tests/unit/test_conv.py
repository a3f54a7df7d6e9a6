"""Conv2D must be indistinguishable from nn.Conv: params, outputs and gradients."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from networks import conv
from networks.conv import Conv2D

# (input [B, H, W, C], features, kernel, strides, padding)
CASES = {
    'nature1': ((2, 84, 84, 4), 32, (8, 8), (4, 4), 'VALID'),
    'nature2': ((3, 20, 20, 32), 64, (4, 4), (2, 2), 'VALID'),
    'nature3': ((3, 9, 9, 64), 64, (3, 3), (1, 1), 'VALID'),
    'impala_in': ((2, 84, 84, 4), 16, (3, 3), (1, 1), 'SAME'),
    'impala_84x16': ((2, 84, 84, 16), 32, (3, 3), (1, 1), 'SAME'),
    'impala_84x32': ((2, 84, 84, 32), 32, (3, 3), (1, 1), 'SAME'),
    'impala_res42': ((2, 42, 42, 16), 16, (3, 3), (1, 1), 'SAME'),
    'impala_res21': ((2, 21, 21, 32), 32, (3, 3), (1, 1), 'SAME'),
    'impala_res11': ((3, 11, 11, 32), 32, (3, 3), (1, 1), 'SAME'),
    'nethack_map16': ((2, 21, 79, 32), 16, (3, 3), (1, 1), 'SAME'),
    'nethack_map8': ((2, 21, 79, 16), 8, (3, 3), (1, 1), 'SAME'),
    'nethack_crop': ((3, 9, 9, 32), 16, (3, 3), (1, 1), 'SAME'),
    # Kernels that are not a multiple of the stride, odd sizes, SAME with stride.
    'odd_same': ((2, 10, 11, 3), 4, (5, 3), (3, 2), 'SAME'),
    'odd_valid': ((2, 10, 11, 3), 4, (5, 3), (3, 2), 'VALID'),
    'stride_gt_kernel': ((2, 9, 9, 3), 4, (2, 2), (3, 3), 'VALID'),
    # Even kernels: SAME pads one more at the end than at the start.
    'even_same': ((2, 9, 10, 3), 4, (4, 2), (1, 2), 'SAME'),
    'even_same_stride1': ((2, 7, 8, 3), 4, (2, 2), (1, 1), 'SAME'),
}


def _close(a, b, tol=1e-4):
  """Relative to the largest magnitude, as float32 sums of different order differ."""
  a, b = np.asarray(a), np.asarray(b)
  assert a.shape == b.shape
  np.testing.assert_allclose(a, b, rtol=0, atol=tol * max(np.abs(a).max(), 1e-6))


def _compare(shape, features, kernel, strides, padding, **kw):
  ref = nn.Conv(features, kernel, strides=strides, padding=padding, **kw)
  ours = Conv2D(features, kernel, strides=strides, padding=padding, **kw)
  # numpy randomness: every new jax.random shape would cost an XLA compile.
  rng = np.random.RandomState(0)
  x = rng.randn(*shape).astype(np.float32)
  shapes = jax.eval_shape(ref.init, jax.random.PRNGKey(0), x)
  # Same names, shapes and dtypes as nn.Conv.
  assert jax.eval_shape(ours.init, jax.random.PRNGKey(0), x) == shapes
  # Random (non-zero) biases too, so that a wrong bias path cannot hide.
  params = jax.tree.map(lambda s: rng.randn(*s.shape).astype(s.dtype), shapes)
  # A fixed random cotangent exercises every output position.
  ct = rng.randn(*jax.eval_shape(ref.apply, params, x).shape).astype(np.float32)

  @jax.jit  # one compilation per case keeps the test fast
  def outputs_and_grads(params, x, ct):
    def run(module):
      y, vjp = jax.vjp(module.apply, params, x)
      return y, vjp(ct)
    return run(ref), run(ours), ours.apply(params, x)

  # Both of Conv2D's forward paths: plain (inference) and under differentiation.
  (y_ref, g_ref), (y, g), y_plain = outputs_and_grads(params, x, ct)
  _close(y_ref, y)
  _close(y_ref, y_plain)
  jax.tree.map(_close, g_ref, g)  # wrt params and x


@pytest.mark.parametrize('name', sorted(CASES))
def test_matches_nn_conv(name):
  _compare(*CASES[name])


def test_same_initial_params():
  """Same initialisers drawing from the same key: a checkpoint of either fits both."""
  x = jnp.zeros((1, 20, 20, 32))
  key = jax.random.PRNGKey(0)
  ref = jax.jit(nn.Conv(64, (4, 4), strides=(2, 2), padding='VALID').init)(key, x)
  ours = jax.jit(Conv2D(64, (4, 4), strides=(2, 2), padding='VALID').init)(key, x)
  jax.tree.map(np.testing.assert_array_equal, ref, ours)


def test_no_bias_int_strides_explicit_padding():
  _compare((2, 12, 13, 3), 4, (3, 3), 2, ((1, 2), (0, 3)), use_bias=False)


def test_leading_dims():
  """[T, B, H, W, C], as a learner sees unrolls."""
  _compare((3, 2, 20, 20, 32), 64, (4, 4), (2, 2), 'VALID')


def test_chunked_batches(monkeypatch):
  """Test batches fit in one chunk; force the scan, incl. zero-padding to whole chunks."""
  monkeypatch.setattr(conv, '_KN2ROW_MAX_BATCH', 0)  # the learner's path, gradient or not
  monkeypatch.setattr(conv, '_CHUNK_BYTES', 1)  # one sample per chunk
  _compare((3, 11, 11, 8), 8, (3, 3), (1, 1), 'SAME')
  monkeypatch.setattr(conv, '_CHUNK_BYTES', 600_000)  # 7 samples -> 2 chunks of 4
  _compare((7, 20, 20, 32), 64, (4, 4), (2, 2), 'VALID')
