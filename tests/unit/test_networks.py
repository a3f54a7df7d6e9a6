"""Network shapes, the PopArt value head, LSTM resets at episode starts, the
ResNet torso, the core's extra inputs and the attention-augmented agent."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from rl import popart
from networks import agent as agent_net
from networks import pooling
from networks import torsos
from networks.heads import PopArtValueHead
from tests.support.network_examples import network_settings

OBS = {
    'mlp': {'state': np.zeros((4,), np.float32)},
    'shallow': {'frames': np.zeros((4, 84, 84), np.uint8)},
    'resnet': {'frames': np.zeros((4, 84, 84), np.uint8)},
    'nle_simple': {'glyphs': np.zeros((21, 79), np.int32),
                   'blstats': np.zeros((27,), np.int32)},
}
EXTRA = {'prev_action': np.zeros((), np.int32), 'prev_reward': np.zeros((), np.float32)}


def _network(name, lstm_size=0, num_values=3, core_extra_inputs=False, **torso_kwargs):
  cfg = ml_collections.ConfigDict({'name': name, 'lstm_size': lstm_size,
                                   'torso_kwargs': torso_kwargs,
                                   'core_extra_inputs': core_extra_inputs})
  return agent_net.make_network(network_settings(cfg), num_actions=5, num_values=num_values)


def _unroll_obs(rng, name, t, b):
  """Random obs [T, B, ...] for network `name`, with the core's extra inputs."""
  obs = {'state': rng.normal(size=(t, b, 4)).astype(np.float32)} if name == 'mlp' else {
      'frames': rng.integers(0, 256, (t, b, 4, 84, 84), dtype=np.uint8)}
  obs['prev_action'] = rng.integers(0, 5, (t, b)).astype(np.int32)
  obs['prev_reward'] = rng.normal(size=(t, b)).astype(np.float32)
  return obs


@pytest.mark.parametrize('name', sorted(OBS))
@pytest.mark.parametrize('lstm_size', [0, 8])
def test_output_shapes(name, lstm_size):
  net = _network(name, lstm_size)
  variables = agent_net.init_variables(net, jax.random.key(0), OBS[name])
  t, b = 3, 2
  obs = jax.tree.map(lambda x: np.broadcast_to(x, (t, b) + x.shape), OBS[name])
  logits, values, state = net.apply(variables, obs, jnp.zeros((t, b), bool),
                                    net.initial_state(b))
  assert logits.shape == (t, b, 5)
  assert values.shape == (t, b, 3)
  assert set(variables['popart'][agent_net.VALUE_HEAD]) == {'mu', 'nu'}
  if lstm_size:
    assert state[0].shape == (b, lstm_size)


def test_popart_head_unnormalises_with_its_statistics():
  head = PopArtValueHead(2)
  x = jnp.ones((4, 3))
  variables = head.init(jax.random.key(0), x)
  stats = {'mu': jnp.asarray([1.0, -5.0]), 'nu': jnp.asarray([5.0, 29.0])}  # sigma 2, 2
  normalised, unnormalised = head.apply({**variables, 'popart': stats}, x)
  np.testing.assert_allclose(unnormalised, 2.0 * normalised + jnp.asarray([1.0, -5.0]),
                             rtol=1e-6)
  np.testing.assert_allclose(popart.sigma(stats), [2.0, 2.0])


def test_lstm_state_resets_where_first_is_set():
  net = _network('mlp', lstm_size=8, num_values=1)
  variables = agent_net.init_variables(net, jax.random.key(0), OBS['mlp'])
  rng = np.random.default_rng(0)
  obs = {'state': rng.normal(size=(4, 2, 4)).astype(np.float32)}
  state = jax.tree.map(lambda x: jnp.ones_like(x) * 3.0, net.initial_state(2))
  # Env 0 starts a new episode at t = 2; env 1 never does.
  first = np.array([[False, False], [False, False], [True, False], [False, False]])
  logits, _, _ = net.apply(variables, obs, first, state)
  # From t = 2 on, env 0 must match a fresh run from a zero state on obs[2:].
  fresh, _, _ = net.apply(variables, {'state': obs['state'][2:]}, first[2:],
                          net.initial_state(2))
  np.testing.assert_allclose(logits[2:, 0], fresh[:, 0], rtol=1e-5, atol=1e-6)
  assert not np.allclose(logits[2:, 1], fresh[:, 1])


def test_the_torso_registry_says_what_each_network_can_do():
  assert torsos.names() == ('attention', 'mlp', 'nle_attention', 'nle_baseline', 'nle_fast',
                            'nle_simple', 'resnet', 'shallow')
  assert torsos.names('recurrent') == ('attention',)
  assert torsos.names('centres_frames') == ('attention', 'resnet', 'shallow')
  assert torsos.names('extra_inputs') == ('nle_baseline', 'nle_fast')
  assert 'mlp' not in torsos.names('convolutional')
  assert all(torsos.get(n).module is not None for n in torsos.names() if n != 'attention')
  with pytest.raises(ValueError, match="unknown network 'nope'; choose one of attention, mlp"):
    torsos.get('nope')
  with pytest.raises(ValueError, match="torso 'mlp' is registered already"):
    torsos.register('mlp', torsos.get('mlp'))


# ---- ResNet torso.

def test_resnet_output_and_parameter_count():
  torso = torsos.ResNetTorso()
  obs = {'frames': np.zeros((2, 4, 84, 84), np.uint8)}
  params = torso.init(jax.random.key(0), obs)['params']
  assert torso.apply({'params': params}, obs).shape == (2, 256)
  count = sum(x.size for x in jax.tree.leaves(params))
  conv = lambda cin, cout: 9 * cin * cout + cout
  stages = sum(conv(cin, c) + 4 * conv(c, c) for cin, c in ((4, 16), (16, 32), (32, 32)))
  assert count == stages + 11 * 11 * 32 * 256 + 256 == 1_089_232
  small = torsos.ResNetTorso(channels=(8, 8), num_blocks=1, hidden_size=32)
  out = small.apply(small.init(jax.random.key(0), obs), obs)
  assert out.shape == (2, 32)  # 84 -> 42 -> 21


@pytest.mark.parametrize('shape', [(2, 84, 84, 3), (2, 21, 21, 5), (3, 11, 10, 2), (1, 2, 2, 1)])
def test_max_pool_equals_flax_forward_and_gradient(shape):
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=shape), jnp.float32)
  flax_pool = lambda v: nn.max_pool(v, (3, 3), (2, 2), 'SAME')
  y, ours_vjp = jax.vjp(pooling.sliced_max_pool, x)
  y_ref, ref_vjp = jax.vjp(flax_pool, x)
  np.testing.assert_array_equal(y, y_ref)
  dy = jnp.asarray(rng.normal(size=y.shape), jnp.float32)
  np.testing.assert_allclose(ours_vjp(dy)[0], ref_vjp(dy)[0], rtol=1e-6, atol=1e-6)


# ---- Core extra inputs: one_hot(prev_action), clip(prev_reward).

def _logits(net, variables, obs, first=None):
  t, b = obs['prev_action'].shape
  first = np.zeros((t, b), bool) if first is None else first
  return net.apply(variables, obs, first, net.initial_state(b))[0]


def test_prev_action_and_reward_feed_the_lstm_core():
  net = _network('mlp', lstm_size=8, core_extra_inputs=True)
  variables = agent_net.init_variables(net, jax.random.key(0), {**OBS['mlp'], **EXTRA})
  obs = _unroll_obs(np.random.default_rng(0), 'mlp', 3, 2)
  base = _logits(net, variables, obs)
  other_action = {**obs, 'prev_action': (obs['prev_action'] + 1) % 5}
  assert not np.allclose(_logits(net, variables, other_action), base)
  small, big = ({**obs, 'prev_reward': np.full((3, 2), r, np.float32)} for r in (0.5, 0.0))
  assert not np.allclose(_logits(net, variables, small), _logits(net, variables, big))
  # The reward is clipped to [-1, 1] in the network: 5 reads as 1.
  one, five = ({**obs, 'prev_reward': np.full((3, 2), r, np.float32)} for r in (1.0, 5.0))
  np.testing.assert_allclose(_logits(net, variables, one), _logits(net, variables, five))


def test_core_extra_inputs_unused_without_a_core():
  net = _network('mlp', lstm_size=0, core_extra_inputs=True)
  variables = agent_net.init_variables(net, jax.random.key(0), {**OBS['mlp'], **EXTRA})
  obs = _unroll_obs(np.random.default_rng(0), 'mlp', 3, 2)
  other = {**obs, 'prev_action': (obs['prev_action'] + 1) % 5, 'prev_reward': obs['prev_reward'] + 1}
  np.testing.assert_array_equal(_logits(net, variables, obs), _logits(net, variables, other))
  # Same parameters as a network built without the flag.
  plain = agent_net.init_variables(_network('mlp'), jax.random.key(0), OBS['mlp'])
  assert jax.tree.map(jnp.shape, plain) == jax.tree.map(jnp.shape, variables)


def test_missing_core_extra_inputs_raise():
  net = _network('mlp', lstm_size=8, core_extra_inputs=True)
  with pytest.raises(ValueError, match='prev_action'):
    agent_net.init_variables(net, jax.random.key(0), OBS['mlp'])


def test_frame_torsos_ignore_core_extra_inputs():
  net = _network('shallow')
  variables = agent_net.init_variables(net, jax.random.key(0), {**OBS['shallow'], **EXTRA})
  assert set(variables['params']['torso']) == {'conv1', 'conv2', 'conv3', 'fc'}


# ---- The attention-augmented agent.

@pytest.fixture(scope='module')
def attention():
  net = _network('attention', lstm_size=16, core_extra_inputs=True)
  variables = agent_net.init_variables(net, jax.random.key(0), {**OBS['shallow'], **EXTRA})
  return net, variables


def test_attention_needs_an_lstm():
  with pytest.raises(ValueError, match='lstm_size'):
    _network('attention', lstm_size=0)


@pytest.mark.parametrize('t', [1, 5])
def test_attention_shapes_state_and_weights(attention, t):
  net, variables = attention
  b = 3
  obs = _unroll_obs(np.random.default_rng(t), 'attention', t, b)
  state = net.initial_state(b)
  (logits, values, new_state), inter = net.apply(
      variables, obs, np.zeros((t, b), bool), state, mutable=['intermediates'])
  assert logits.shape == (t, b, 5)
  assert values.shape == (t, b, 3)
  assert jax.tree.structure(new_state) == jax.tree.structure(state)
  assert jax.tree.map(jnp.shape, new_state) == jax.tree.map(jnp.shape, state)
  assert state['vision'][0].shape == (b, 9, 9, 64)
  (weights,) = inter['intermediates']['attention_core']['attention_weights']
  assert weights.shape == (t, b, 4, 9, 9)
  np.testing.assert_allclose(weights.sum((-2, -1)), 1.0, rtol=1e-5)
  # Without `mutable`, the call is the usual 3-tuple and stores nothing.
  plain = net.apply(variables, obs, np.zeros((t, b), bool), state)
  np.testing.assert_allclose(plain[0], logits, rtol=1e-5, atol=1e-6)


def test_attention_weights_follow_the_query(attention):
  """The weights are a softmax over positions of query . key (Mott et al.
  2019): on the same frames another policy-LSTM output (the query's source)
  moves them, and a query of zeros attends to every position alike."""
  net, variables = attention
  obs = _unroll_obs(np.random.default_rng(3), 'attention', 1, 2)
  first = np.zeros((1, 2), bool)

  @jax.jit   # one compile for the three calls
  def weights(variables, state):
    _, inter = net.apply(variables, obs, first, state, mutable=['intermediates'])
    (w,) = inter['intermediates']['attention_core']['attention_weights']
    return w[0]                                                  # [B, 4, 9, 9]

  state = net.initial_state(2)
  base = weights(variables, state)
  pc, ph = state['policy']
  other = {**state, 'policy': (pc, jnp.asarray(np.random.default_rng(4).normal(size=ph.shape),
                                               ph.dtype))}
  moved = weights(variables, other)
  np.testing.assert_allclose(moved.sum((-2, -1)), 1.0, rtol=1e-5)
  assert np.abs(moved - base).max() > 1e-3
  params = jax.tree.map(lambda x: x, variables['params'])   # a copy to change
  last = dict(params['attention_core']['step']['query_mlp_1'])
  params['attention_core']['step']['query_mlp_1'] = jax.tree.map(jnp.zeros_like, last)
  np.testing.assert_allclose(weights({**variables, 'params': params}, other), 1.0 / 81,
                             rtol=1e-5)


def test_attention_state_resets_where_first_is_set(attention):
  net, variables = attention
  obs = _unroll_obs(np.random.default_rng(0), 'attention', 4, 2)
  state = jax.tree.map(lambda x: jnp.full_like(x, 0.5), net.initial_state(2))
  first = np.array([[False, False], [False, False], [True, False], [False, False]])
  logits, _, _ = net.apply(variables, obs, first, state)
  fresh, _, _ = net.apply(variables, jax.tree.map(lambda x: x[2:], obs), first[2:],
                          net.initial_state(2))
  np.testing.assert_allclose(logits[2:, 0], fresh[:, 0], rtol=1e-4, atol=1e-6)
  assert not np.allclose(logits[2:, 1], fresh[:, 1])


def test_attention_gradient_reaches_the_queries(attention):
  net, variables = attention
  obs = _unroll_obs(np.random.default_rng(0), 'attention', 3, 2)

  def loss(params):
    logits, values, _ = net.apply({**variables, 'params': params}, obs,
                                  np.zeros((3, 2), bool), net.initial_state(2))
    return jnp.sum(logits ** 2) + jnp.sum(values ** 2)

  grads = jax.jit(jax.grad(loss))(variables['params'])['attention_core']   # jitted: op by op is slow
  for name in ('query_mlp_0', 'query_mlp_1', 'conv_lstm_hidden'):
    assert float(jnp.abs(grads['step'][name]['kernel']).max()) > 0, name
  assert float(jnp.abs(grads['vision_conv0']['kernel']).max()) > 0


def test_attention_answer_mlp_sits_between_the_answers_and_the_lstm(attention):
  """answer_sizes=(a, b) puts the paper's answer MLP (ReLU layers a, b) on the
  answers + queries + extra inputs, and the policy LSTM reads its b outputs;
  the default () keeps the LSTM on the raw concatenation (and a run saved
  without the MLP restores with the same parameters)."""
  _, plain = attention
  step = plain['params']['attention_core']['step']
  assert not any(name.startswith('answer_mlp') for name in step)
  raw = step['policy_lstm']['ii']['kernel'].shape[0]      # 4 * (56 + 16) + 4 * 24 + 5 + 1
  assert raw == 4 * (56 + 16) + 4 * (8 + 16) + 5 + 1
  net = _network('attention', lstm_size=16, core_extra_inputs=True, answer_sizes=(32, 24))
  variables = agent_net.init_variables(net, jax.random.key(0), {**OBS['shallow'], **EXTRA})
  step = variables['params']['attention_core']['step']
  assert step['answer_mlp_0']['kernel'].shape == (raw, 32)
  assert step['answer_mlp_1']['kernel'].shape == (32, 24)
  assert step['policy_lstm']['ii']['kernel'].shape[0] == 24
  obs = _unroll_obs(np.random.default_rng(0), 'attention', 2, 3)

  def loss(params):
    logits, values, _ = net.apply({**variables, 'params': params}, obs,
                                  np.zeros((2, 3), bool), net.initial_state(3))
    return jnp.sum(logits ** 2) + jnp.sum(values ** 2)

  grads = jax.jit(jax.grad(loss))(variables['params'])['attention_core']['step']
  for name in ('answer_mlp_0', 'answer_mlp_1', 'query_mlp_0'):
    assert float(jnp.abs(grads[name]['kernel']).max()) > 0, name

