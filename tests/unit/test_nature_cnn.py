"""networks/nature_cnn.py: the fused Nature CNN equals the plain network
(nn.Conv, lax convolutions) in outputs, parameter gradients and health
maxima, with and without a gradient, for batches that fill no chunk, one
chunk, and chunks plus a remainder."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from networks import nature_cnn
from networks.torsos import NatureCNNTorso

LAYERS = (('conv1', 32, 8, 4), ('conv2', 64, 4, 2), ('conv3', 64, 3, 1))


class PlainNatureCNN(nn.Module):
  """The reference: XLA's own convolutions, relu outputs kept."""

  @nn.compact
  def __call__(self, frames):
    x = jnp.transpose(frames, (0, 2, 3, 1)).astype(jnp.float32) / 255.0
    acts = {}
    for name, features, k, s in LAYERS:
      x = nn.relu(nn.Conv(features, (k, k), strides=(s, s), padding='VALID', name=name)(x))
      acts[name] = x
    x = nn.relu(nn.Dense(512, name='fc')(x.reshape((x.shape[0], -1))))
    acts['fc'] = x
    return x, acts


def _frames(n, seed=0, size=84):
  frames = np.random.default_rng(seed).integers(0, 256, (n, 4, size, size), dtype=np.uint8)
  if n > 2:
    frames[1] = 0     # a black frame: only the biases reach conv1
  return jnp.asarray(frames)


@pytest.fixture(scope='module')
def params():
  # Random biases too (the initialiser's are zero), so that they are tested.
  p = jax.jit(PlainNatureCNN().init)(jax.random.key(0), _frames(1))['params']
  keys = iter(jax.random.split(jax.random.key(1), 8))
  return jax.tree.map(lambda v: v + 0.05 * jax.random.normal(next(keys), v.shape) if v.ndim == 1 else v,
                      p)


def _min_abs_preactivation(params, frames):
  x = jnp.transpose(frames, (0, 2, 3, 1)).astype(jnp.float32) / 255.0
  low = np.inf
  for name, _, _, s in LAYERS:
    x = jax.lax.conv_general_dilated(x, params[name]['kernel'], (s, s), 'VALID',
                                     dimension_numbers=('NHWC', 'HWIO', 'NHWC')) + params[name]['bias']
    low = min(low, float(jnp.abs(x).min()))
    x = nn.relu(x)
  return low


def _frames_without_ties(params, n):
  """Frames on which no relu input is within 2e-6 of 0: there, float
  summation order can flip a relu's gate (seen: -1.4e-7 in one of 37
  frames), and a gradient then differs by that unit's whole share."""
  for seed in range(n, n + 20):
    frames = _frames(n, seed)
    if _min_abs_preactivation(params, frames) > 2e-6:
      return frames
  raise AssertionError('no tie-free frames found')


def _close(a, b, scale=None):
  scale = float(np.abs(np.asarray(b)).max()) if scale is None else scale
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=2e-5 * max(scale, 1e-3))


def test_params_are_the_plain_networks():
  frames = _frames(2)
  fast = jax.jit(NatureCNNTorso().init)(jax.random.key(0), {'frames': frames})['params']
  plain = jax.jit(PlainNatureCNN().init)(jax.random.key(0), frames)['params']
  shapes = lambda p: jax.tree.map(lambda v: (v.shape, v.dtype), p)
  assert shapes(fast) == shapes(plain)
  assert set(fast) == {'conv1', 'conv2', 'conv3', 'fc'}
  # Same initialisers and names: even the initial values are the plain layers', to the last bit
  # of float32 (two programs may round the initialiser's transform differently: the fast line
  # compiles without LLVM's optimisation, tests/conftest.py).
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7), fast, plain)


@pytest.mark.parametrize('n', [1, 3, 16, 37])   # 37 = two chunks of 16 and a remainder of 5
def test_outputs_gradients_and_health_equal_the_plain_network(params, n):
  frames = _frames_without_ties(params, n)
  proj = jax.random.normal(jax.random.key(n), (n, 512))
  torso = NatureCNNTorso()

  def fast_loss(p):
    out, sown = torso.apply({'params': p}, {'frames': frames}, mutable=['health'])
    return jnp.sum(out * proj), (out, sown['health'])

  def plain_loss(p):
    out, acts = PlainNatureCNN().apply({'params': p}, frames)
    return jnp.sum(out * proj), (out, acts)

  (_, (out, health)), grads = jax.jit(jax.value_and_grad(fast_loss, has_aux=True))(params)
  (_, (ref, acts)), ref_grads = jax.jit(jax.value_and_grad(plain_loss, has_aux=True))(params)
  _close(out, ref)
  for path, g in jax.tree_util.tree_flatten_with_path(grads)[0]:
    r = ref_grads
    for k in path:
      r = r[k.key]
    _close(g, r)
  assert set(health) == {'conv1', 'conv2', 'conv3', 'fc'}
  for name, (unit_max,) in health.items():
    assert unit_max.shape == acts[name].shape[1:]
    _close(unit_max, acts[name].max(0))

  # No gradient (the actors' path): the same outputs.
  no_grad = jax.jit(lambda p, f: torso.apply({'params': p}, {'frames': f}))(params, frames)
  _close(no_grad, ref)


def test_health_maxima_are_exact_and_see_dead_units(params):
  frames = _frames(21)
  dead = jax.tree.map(lambda v: v, params)
  dead['conv2']['bias'] = dead['conv2']['bias'].at[:8].set(-1e3)   # 8 units that never fire
  _, sown = jax.jit(lambda v, f: NatureCNNTorso().apply(v, {'frames': f}, mutable=['health']))(
      {'params': dead}, frames)
  m2 = sown['health']['conv2'][0]
  assert (m2[..., :8] == 0).all() and (m2[..., 8:] > 0).any()


def test_op_ignores_the_maxima_cotangent_and_gives_no_frame_gradient(params):
  frames = _frames(3)
  p = [params[name][k] for name, *_ in LAYERS for k in ('kernel', 'bias')]
  f = lambda *p: jnp.sum(nature_cnn.nature_convs(frames, *p)[1][0])
  grads = jax.jit(jax.grad(f, argnums=range(6)))(*p)
  assert all(float(jnp.abs(g).max()) == 0 for g in grads)


def test_other_frame_sizes_use_plain_convs_with_the_same_params():
  frames = _frames(3, size=40)
  assert not nature_cnn.supported(frames) and nature_cnn.supported(_frames(1))
  variables = jax.jit(NatureCNNTorso().init)(jax.random.key(0), {'frames': frames})
  out, sown = jax.jit(lambda v, f: NatureCNNTorso().apply(v, {'frames': f}, mutable=['health']))(
      variables, frames)
  ref, acts = jax.jit(PlainNatureCNN().apply)(variables, frames)
  _close(out, ref)
  _close(sown['health']['conv3'][-1], acts['conv3'].max(0))


class CentredPlainNatureCNN(nn.Module):
  """The reference with frame centring: (frames - centres[task]) / 255 into XLA's convolutions."""

  @nn.compact
  def __call__(self, frames, task_id, centres):
    x = jnp.transpose((frames.astype(jnp.float32) - centres[task_id][:, None]) / 255.0, (0, 2, 3, 1))
    for name, features, k, s in LAYERS:
      x = nn.relu(nn.Conv(features, (k, k), strides=(s, s), padding='VALID', name=name)(x))
    return nn.relu(nn.Dense(512, name='fc')(x.reshape((x.shape[0], -1))))


@pytest.mark.parametrize('n,size', [(3, 84), (37, 84), (3, 40)])   # fused (a remainder), plain convs
def test_centred_frames_equal_the_plain_network_on_centred_input(params, n, size):
  """With num_centres the torso reads obs['task_id'] and its `frame_centre`
  params: outputs and gradients are the plain network's on (frames -
  mean[task]) / 255, and the centres get no gradient."""
  rng = np.random.default_rng(n)
  frames = _frames(n, seed=n, size=size)
  task = jnp.asarray(rng.integers(0, 3, n), jnp.int32)
  torso = NatureCNNTorso(num_centres=3)
  variables = jax.jit(torso.init)(jax.random.key(0), {'frames': frames, 'task_id': task})
  p = variables['params']
  assert p['frame_centre']['mean'].shape == (3, size, size)
  assert p['frame_centre']['count'].shape == (3,)
  centres = jnp.asarray(rng.uniform(0, 255, (3, size, size)), jnp.float32)
  p = {**p, 'frame_centre': {'mean': centres, 'count': jnp.ones(3)}}
  if size == 84:   # the fixture's layers, with random biases
    p = {**p, **params}
  proj = jax.random.normal(jax.random.key(n), (n, 512))
  ref_params = {k: v for k, v in p.items() if k != 'frame_centre'}

  fast = jax.jit(jax.value_and_grad(lambda q: jnp.sum(torso.apply(
      {'params': q}, {'frames': frames, 'task_id': task}) * proj)))
  plain = jax.jit(jax.value_and_grad(lambda q: jnp.sum(CentredPlainNatureCNN().apply(
      {'params': q}, frames, task, centres) * proj)))
  value, grads = fast(p)
  ref_value, ref_grads = plain(ref_params)
  _close(value, ref_value)
  for name in ref_grads:
    jax.tree.map(_close, grads[name], ref_grads[name])
  assert float(jnp.abs(grads['frame_centre']['mean']).max()) == 0.0
  assert float(jnp.abs(grads['frame_centre']['count']).max()) == 0.0
