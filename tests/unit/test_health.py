"""rl/health.py: dead units and the policy's spread over states, by hand,
and the torsos' health sows through the network."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from rl import health
from networks import agent as agent_net
from tests.support.network_examples import network_settings


def test_dead_shares_by_hand():
  unit_max = {'conv1': jnp.asarray([[0.0, 1.0], [0.0, -0.0]]), 'fc': jnp.asarray([2.0, 0.5, 0.0])}
  out = health.dead_shares(unit_max)
  np.testing.assert_allclose(out['dead/conv1'], 0.75)
  np.testing.assert_allclose(out['dead/fc'], 1 / 3, rtol=1e-6)


def test_logit_spread_by_hand():
  # Two actions, three states, the middle one masked out.
  log_pi = jnp.log(jnp.asarray([[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]]))
  mask = jnp.asarray([1.0, 0.0, 1.0])
  a = np.log([0.5, 0.2])
  b = np.log([0.5, 0.8])
  expected = (np.std(a) + np.std(b)) / 2
  np.testing.assert_allclose(health.logit_spread(log_pi, mask), expected, rtol=1e-5)
  # A policy that ignores its input has spread 0.
  same = jnp.log(jnp.full((4, 3), 1 / 3))
  np.testing.assert_allclose(health.logit_spread(same, jnp.ones(4)), 0.0, atol=1e-6)


def test_sharded_health_equals_one_device():
  unit = jnp.asarray(np.random.default_rng(0).normal(size=(4, 8, 5)), jnp.float32)
  log_pi = jax.nn.log_softmax(jnp.asarray(np.random.default_rng(1).normal(size=(4, 6, 3))))
  mask = jnp.asarray(np.random.default_rng(2).random((4, 6)) > 0.3, jnp.float32)
  one = health.metrics({'l': unit.max(axis=(0, 1))}, log_pi.reshape(24, 3), mask.reshape(24))
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:4]), ('d',))
  P = jax.sharding.PartitionSpec
  f = jax.shard_map(lambda u, lp, m: health.metrics({'l': u[0].max(axis=0)}, lp[0], m[0], 'd'),
                    mesh=mesh, in_specs=(P('d'), P('d'), P('d')), out_specs=P(), check_vma=False)
  four = f(unit, log_pi, mask)
  for k in one:
    np.testing.assert_allclose(four[k], one[k], rtol=1e-5)


def test_mlp_and_cnn_sow_their_relu_maxima():
  for name, obs, layers in [
      ('mlp', {'state': np.random.default_rng(0).normal(size=(2, 3, 4)).astype(np.float32)},
       {'fc0': (64,), 'fc1': (64,)}),
      ('shallow', {'frames': np.random.default_rng(0).integers(0, 255, (2, 3, 4, 84, 84)
                                                                 ).astype(np.uint8)},
       {'conv1': (20, 20, 32), 'conv2': (9, 9, 64), 'conv3': (7, 7, 64), 'fc': (512,)}),
      ('resnet', {'frames': np.random.default_rng(0).integers(0, 255, (1, 2, 4, 84, 84)
                                                                ).astype(np.uint8)},
       {'stages': (11, 11, 32), 'fc': (256,)})]:
    cfg = ml_collections.ConfigDict({'name': name, 'lstm_size': 0, 'torso_kwargs': {},
                                     'core_extra_inputs': False})
    network = agent_net.make_network(network_settings(cfg), num_actions=3, num_values=1)
    variables = agent_net.init_variables(network, jax.random.key(0),
                                         jax.tree.map(lambda x: x[0, 0], obs))
    first = np.zeros(next(iter(obs.values())).shape[:2], bool)
    out = agent_net.apply_fn(network, with_health=True)(
        variables['params'], variables['popart']['value_head'], obs, first, ())
    assert len(out) == 4
    assert {k: v.shape for k, v in out[3].items()} == layers
    plain = agent_net.apply_fn(network)(variables['params'], variables['popart']['value_head'],
                                        obs, first, ())
    np.testing.assert_allclose(out[0], plain[0], rtol=1e-6)
    assert all(float(v.min()) >= 0 for v in out[3].values())   # maxima of ReLU outputs


def test_logit_spread_of_a_blind_policy_is_zero_in_float32():
  """640 states of the same near-uniform policy (log-probabilities near
  -1.79): the spread must read 0, not float32 rounding noise."""
  log_pi = jnp.broadcast_to(jax.nn.log_softmax(jnp.asarray([0.01, -0.02, 0.0, 0.03, 0.0, -0.01])),
                            (640, 6)).astype(jnp.float32)
  np.testing.assert_allclose(health.logit_spread(log_pi, jnp.ones(640)), 0.0, atol=1e-6)
