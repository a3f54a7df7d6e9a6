"""Network shapes, the PopArt value head, and LSTM resets at episode starts."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from agents import popart
from networks import agent as agent_net
from networks.heads import PopArtValueHead

OBS = {
    'mlp': {'state': np.zeros((4,), np.float32)},
    'shallow': {'frames': np.zeros((4, 84, 84), np.uint8)},
    'nle_simple': {'glyphs': np.zeros((21, 79), np.int32),
                   'blstats': np.zeros((27,), np.int32)},
}


def _network(name, lstm_size=0, num_values=3):
  cfg = ml_collections.ConfigDict({'name': name, 'lstm_size': lstm_size, 'torso_kwargs': {}})
  return agent_net.make_network(cfg, num_actions=5, num_values=num_values)


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
