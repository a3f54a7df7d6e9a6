"""NetHack networks: the crop at the map edges, shapes through AgentNetwork,
attention weights, parameter counts, and the fast glyph_conv_stack path
against the plain nn.Embed / nn.Conv reference (values and gradients)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from networks import agent as agent_net
from networks import conv_stack
from networks import nethack
from networks import torsos
from tests.support.network_examples import network_settings

H, W = 21, 79


def _obs(rng, n, positions=None):
  """n observations [n, ...]: random glyphs (all of [0, NO_GLYPH]) and blstats
  with the agent at `positions` [(x, y)] or at random."""
  glyphs = rng.integers(0, nethack.NLE_NUM_GLYPHS, (n, H, W)).astype(np.int32)
  blstats = rng.integers(0, 30, (n, 27)).astype(np.int32)
  xy = positions or [(rng.integers(0, W), rng.integers(0, H)) for _ in range(n)]
  blstats[:, 0], blstats[:, 1] = np.asarray(xy).T
  return {'glyphs': glyphs, 'blstats': blstats}


def _close(a, b, tol=1e-5, scale=0.0):
  """Relative to the largest magnitude (or `scale` if larger): float32 sums
  in another order differ."""
  a, b = np.asarray(a), np.asarray(b)
  assert a.shape == b.shape
  np.testing.assert_allclose(a, b, rtol=0, atol=tol * max(np.abs(b).max(), scale, 1e-6))


def _close_trees(a, b):
  """Leaf by leaf, with a floor of 1e-3 of the largest leaf: a leaf whose
  gradient nearly cancels is compared at the scale of the others."""
  scale = 1e-3 * max(float(np.abs(x).max()) for x in jax.tree.leaves(b))
  jax.tree.map(lambda x, y: _close(x, y, scale=scale), a, b)


def _random_variables(init, *args):
  """Variables shaped as init(*args) would make them, drawn with numpy: an
  XLA compilation of init costs seconds per network here."""
  rng = np.random.RandomState(0)

  def draw(path, leaf):
    name = jax.tree_util.keystr(path)
    if 'popart' in name:
      return np.ones(leaf.shape, leaf.dtype) if "'nu'" in name else np.zeros(leaf.shape, leaf.dtype)
    fan_in = int(np.prod(leaf.shape[:-1])) if leaf.ndim > 1 and 'embedding' not in name else 100
    return (rng.randn(*leaf.shape) / np.sqrt(fan_in)).astype(leaf.dtype)

  return jax.tree_util.tree_map_with_path(draw, jax.eval_shape(init, jax.random.key(0), *args))


# ---- The crop.

def test_crop_matches_a_slice_of_the_padded_map_at_the_edges():
  rng = np.random.default_rng(0)
  xy = [(0, 0), (78, 20), (40, 10), (3, 17)]
  obs = _obs(rng, len(xy), xy)
  crops = np.asarray(nethack.crop_glyphs(jnp.asarray(obs['glyphs']), obs['blstats'][:, 0],
                                         obs['blstats'][:, 1]))
  assert crops.shape == (4, 9, 9)
  padded = np.pad(obs['glyphs'], ((0, 0), (4, 4), (4, 4)), constant_values=nethack.NO_GLYPH)
  for n, (x, y) in enumerate(xy):
    np.testing.assert_array_equal(crops[n], padded[n, y:y + 9, x:x + 9])
    assert crops[n, 4, 4] == obs['glyphs'][n, y, x]  # the agent's cell at the centre
  # Top-left corner: four rows and columns beyond the map, then the map.
  assert (crops[0, :4] == nethack.NO_GLYPH).all() and (crops[0, :, :4] == nethack.NO_GLYPH).all()
  np.testing.assert_array_equal(crops[0, 4:, 4:], obs['glyphs'][0, :5, :5])
  # Bottom-right corner.
  assert (crops[1, 5:] == nethack.NO_GLYPH).all() and (crops[1, :, 5:] == nethack.NO_GLYPH).all()
  np.testing.assert_array_equal(crops[1, :5, :5], obs['glyphs'][1, -5:, -5:])


# ---- Through AgentNetwork.

def _network(name, **torso_kwargs):
  cfg = ml_collections.ConfigDict({'name': name, 'lstm_size': 512, 'core_extra_inputs': True,
                                   'torso_kwargs': torso_kwargs})
  return agent_net.make_network(network_settings(cfg), num_actions=23, num_values=4)


@pytest.fixture(scope='module', params=['nle_fast', 'nle_baseline', 'nle_attention'])
def network(request):
  net = _network(request.param)
  example = {**jax.tree.map(lambda x: x[0], _obs(np.random.default_rng(0), 1)),
             'prev_action': np.zeros((), np.int32), 'prev_reward': np.zeros((), np.float32)}
  return request.param, net, _random_variables(
      lambda rng: agent_net.init_variables(net, rng, example))


def test_nle_attention_weights_follow_the_blstats_query():
  """The course report's attention: one query made from blstats over the
  3x10 grid. Other blstats on the same glyphs move the weights; a query
  of zeros attends to the 30 positions alike."""
  net = _network('nle_attention')
  rng = np.random.default_rng(5)
  obs = _obs(rng, 1, [(40, 10)])
  example = {**jax.tree.map(lambda x: x[0], obs), 'prev_action': np.zeros((), np.int32),
             'prev_reward': np.zeros((), np.float32)}
  variables = _random_variables(lambda key: agent_net.init_variables(net, key, example))

  @jax.jit   # one compile for the three calls
  def weights(variables, blstats):
    o = {'glyphs': obs['glyphs'][None], 'blstats': blstats[None],
         'prev_action': np.zeros((1, 1), np.int32), 'prev_reward': np.zeros((1, 1), np.float32)}
    _, inter = net.apply(variables, o, np.zeros((1, 1), bool), net.initial_state(1),
                         mutable=['intermediates'])
    (w,) = inter['intermediates']['torso']['attention_weights']
    return w[0]                                                  # [3, 10]

  base = weights(variables, obs['blstats'])
  other = obs['blstats'].copy()
  other[:, 2:] = rng.integers(0, 30, (1, 25))                   # the agent stays at (40, 10)
  moved = weights(variables, other)
  np.testing.assert_allclose(moved.sum(), 1.0, rtol=1e-5)
  assert np.abs(moved - base).max() > 1e-3
  params = jax.tree.map(lambda x: x, variables['params'])
  params['torso']['query'] = jax.tree.map(np.zeros_like, dict(params['torso']['query']))
  np.testing.assert_allclose(weights({**variables, 'params': params}, other), 1.0 / 30, rtol=1e-5)


def test_registered_with_their_observation_keys():
  for name in ('nle_fast', 'nle_baseline', 'nle_attention'):
    assert name in torsos.names()
    assert torsos.get(name).obs_keys == ('glyphs', 'blstats')


@pytest.mark.parametrize('t', [1, 3])
def test_shapes_and_attention_weights(network, t):
  name, net, variables = network
  b = 2
  rng = np.random.default_rng(t)
  # The agent at both corners, as well as inside the map.
  obs = _obs(rng, t * b, ([(0, 0), (78, 20), (40, 10)] * 2)[:t * b])
  obs = jax.tree.map(lambda x: x.reshape((t, b) + x.shape[1:]), obs)
  obs['prev_action'] = rng.integers(0, 23, (t, b)).astype(np.int32)
  obs['prev_reward'] = rng.normal(size=(t, b)).astype(np.float32)
  apply = jax.jit(lambda v, o: net.apply(v, o, np.zeros((t, b), bool), net.initial_state(b),
                                         mutable=['intermediates']))
  (logits, values, state), inter = apply(variables, obs)
  assert logits.shape == (t, b, 23) and values.shape == (t, b, 4)
  assert state[0].shape == state[1].shape == (b, 512)
  assert np.isfinite(logits).all()
  if name == 'nle_attention':
    (weights,) = inter['intermediates']['torso']['attention_weights']
    assert weights.shape == (t * b, 3, 10)
    np.testing.assert_allclose(weights.sum((1, 2)), 1.0, rtol=1e-5)
    assert (weights >= 0).all()


def _conv(cin, cout):
  return 9 * cin * cout + cout


def _dense(cin, cout):
  return cin * cout + cout


def test_parameter_counts(network):
  name, _, variables = network
  params = variables['params']
  count = lambda tree: sum(x.size for x in jax.tree.leaves(tree))
  embed = nethack.NLE_NUM_GLYPHS * 32
  blstats = _dense(27, 32) + _dense(32, 32)
  if name in ('nle_baseline', 'nle_fast'):
    stack = _conv(32, 16) + 3 * _conv(16, 16) + _conv(16, 8)
    # nle_fast: the map's CNN is 32 -> 16 -> 8, the crop's the baseline's.
    map_stack = stack if name == 'nle_baseline' else _conv(32, 16) + _conv(16, 8)
    fc = _dense(21 * 79 * 8 + 9 * 9 * 8 + 32, 512) + _dense(512, 512)
    expected = embed + map_stack + stack + blstats + fc
    assert expected == {'nle_baseline': 7_625_296, 'nle_fast': 7_618_336}[name]
    assert sorted(k for k in params['torso'] if k.startswith('map_conv')) == [
        f'map_conv{i}' for i in range(5 if name == 'nle_baseline' else 2)]
  else:
    cnn = (_conv(32, 16) + 2 * _conv(16, 16) + _conv(16, 32) + 2 * _conv(32, 32)
           + _conv(32, 64) + 2 * _conv(64, 64))
    attention = 3 * 10 * 64 + _dense(32, 64) + 64 * 64 + _dense(64, 64)  # keys: no bias
    fc = _dense(64 + 32 + 3 * 10 * 64, 512) + _dense(512, 512)
    expected = embed + cnn + blstats + attention + fc
  assert count(params['torso']) == expected
  # LSTM 512 over [512 features, one-hot action (23), reward]; heads 23 + 4.
  assert count(params["core"]) == 4 * (512 + 24) * 512 + 4 * _dense(512, 512)
  assert count(params) == count(params['torso']) + count(params['core']) + _dense(512, 23) + _dense(512, 4)


# ---- The fast path equals the plain reference.

@pytest.mark.parametrize('name', ['nle_fast', 'nle_baseline', 'nle_attention'])
def test_fast_torso_equals_reference_values_and_gradients(name):
  # A small FC keeps the compilations short; the glyph path is full size.
  fast, ref = (torsos.get(name).module(reference=r, hidden_size=32) for r in (False, True))
  obs = _obs(np.random.default_rng(1), 4, [(0, 0), (78, 20), (40, 10), (77, 1)])
  params = _random_variables(fast.init, obs)['params']
  assert (jax.tree.map(jnp.shape, {'params': params})
          == jax.tree.map(jnp.shape, jax.eval_shape(ref.init, jax.random.key(0), obs)))
  ct = np.random.default_rng(2).normal(size=(4, 32)).astype(np.float32)

  @jax.jit
  def outputs_and_grads(params):
    def run(module):
      y, vjp = jax.vjp(lambda p: module.apply({'params': p}, obs), params)
      return y, vjp(ct)[0]
    return run(fast), run(ref)

  (yf, gf), (yr, gr) = outputs_and_grads(params)
  _close(yf, yr)
  _close_trees(gf, gr)
  # Every parameter gets a gradient, the embedding included.
  assert all(float(jnp.abs(g).max()) > 0 for g in jax.tree.leaves(gf))


def _reference_stack(glyphs, embedding, kernels, biases):
  x = jnp.take(embedding, glyphs, axis=0)
  for k, b in zip(kernels, biases):
    x = nn.elu(jax.lax.conv_general_dilated(x, k, (1, 1), ((1, 1), (1, 1)),
                                            dimension_numbers=('NHWC', 'HWIO', 'NHWC')) + b)
  return x


@pytest.mark.parametrize('shape,cells,channels', [
    ((6, 21, 79), (2 * 21 * 79, 21 * 79), (6, 5, 4, 3)),  # several chunks
    ((5, 9, 9), (10 ** 6, 10 ** 6), (6, 5, 4, 3)),        # one chunk
    ((7, 4, 3), (8 * 12, 3 * 12), (6, 5, 4, 3)),          # odd sizes
    ((3, 5, 7), (2 * 35, 35), (6, 4))])                   # the table-lookup layer alone
def test_glyph_conv_stack_equals_embed_and_convs(monkeypatch, shape, cells, channels):
  monkeypatch.setattr(conv_stack, '_FWD_CELLS', cells[0])
  monkeypatch.setattr(conv_stack, '_BWD_CELLS', cells[1])
  rng = np.random.RandomState(0)
  glyphs = rng.randint(0, 50, shape).astype(np.int32)
  glyphs[0, 0, 0] = glyphs[-1, -1, -1] = 49  # the edges and a repeated glyph
  embedding = rng.randn(50, channels[0]).astype(np.float32)
  kernels = [rng.randn(3, 3, a, b).astype(np.float32) / 3 for a, b in zip(channels, channels[1:])]
  biases = [rng.randn(b).astype(np.float32) for b in channels[1:]]
  ct = rng.randn(*shape, channels[-1]).astype(np.float32)

  @jax.jit
  def both(embedding, kernels, biases):
    def run(f):
      return jax.value_and_grad(lambda *a: jnp.vdot(f(glyphs, *a), ct), argnums=(0, 1, 2))(
          embedding, kernels, biases)
    return (run(conv_stack.glyph_conv_stack), run(_reference_stack),
            conv_stack.glyph_conv_stack(glyphs, embedding, kernels, biases))

  (lf, gf), (lr, gr), y = both(embedding, kernels, biases)
  _close(y, _reference_stack(glyphs, embedding, kernels, biases))
  _close(lf, lr)
  _close_trees(gf, gr)
  # Glyphs absent from the batch get no embedding gradient.
  absent = np.setdiff1d(np.arange(50), glyphs)
  if absent.size:
    assert not np.asarray(gf[0])[absent].any()


def test_first_layer_table_lookup_by_hand():
  # One 2x2 map of glyphs [[0, 1], [1, 0]], embedding size 1 (e_0 = 1, e_1 = 2),
  # one output channel, kernel taps w[i, j] = 10 i + j (i, j = row, column
  # offset + 1), bias 0.5: out[p] = 0.5 + sum over taps of w[i, j] * e[glyph
  # at p + (i - 1, j - 1)], 0 outside the map.
  glyphs = np.array([[[0, 1], [1, 0]]], np.int32)
  embedding = np.array([[1.0], [2.0]], np.float32)
  w = np.array([[10.0 * i + j for j in range(3)] for i in range(3)], np.float32)
  kernel = w.reshape(3, 3, 1, 1)
  tables = conv_stack._tap_tables(jnp.asarray(embedding), jnp.asarray(kernel))
  out = np.asarray(conv_stack._embed_conv3x3(jnp.asarray(glyphs), tables, jnp.array([0.5])))
  e = lambda r, c: embedding[glyphs[0, r, c], 0] if 0 <= r < 2 and 0 <= c < 2 else 0.0
  for r in range(2):
    for c in range(2):
      want = 0.5 + sum(w[i, j] * e(r + i - 1, c + j - 1) for i in range(3) for j in range(3))
      assert out[0, r, c, 0] == pytest.approx(want)
  # Cell (0, 0): taps (1,1) e0=1 -> 11, (1,2) e1=2 -> 24, (2,1) e1=2 -> 42, (2,2) e0=1 -> 22.
  assert out[0, 0, 0, 0] == pytest.approx(0.5 + 11 + 24 + 42 + 22)
