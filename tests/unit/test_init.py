"""networks/init.py: the orthogonal scheme's gains, shapes and zero biases."""

import jax
import ml_collections
import numpy as np
import pytest

from networks import agent as agent_net
from networks import init as init_lib
from tests.support.network_examples import network_settings


def _variables(name, init, lstm_size=0, obs=None):
  cfg = ml_collections.ConfigDict({'name': name, 'lstm_size': lstm_size, 'torso_kwargs': {},
                                   'core_extra_inputs': False})
  network = agent_net.make_network(network_settings(cfg), num_actions=6, num_values=2)
  obs = obs or {'state': np.zeros((4,), np.float32)}
  return agent_net.init_variables(network, jax.random.key(0), obs, init=init)


def _gram(kernel):
  m = np.asarray(kernel).reshape(-1, kernel.shape[-1])
  return m.T @ m


@pytest.mark.parametrize('name, obs', [
    ('mlp', {'state': np.zeros((4,), np.float32)}),
    ('shallow', {'frames': np.zeros((4, 84, 84), np.uint8)}),
])
def test_orthogonal_gains(name, obs):
  params = _variables(name, 'orthogonal', lstm_size=16, obs=obs)['params']
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  kernels = {tuple(k.key for k in path): v for path, v in flat if path[-1].key == 'kernel'}
  assert kernels
  for path, kernel in kernels.items():
    gain = {'policy_head': 0.01, 'value_head': 1.0, 'core': 1.0}.get(path[0], np.sqrt(2.0))
    fan_in, fan_out = int(np.prod(kernel.shape[:-1])), kernel.shape[-1]
    gram = _gram(kernel)
    if fan_in >= fan_out:   # orthonormal columns, scaled by the gain
      np.testing.assert_allclose(gram, gain ** 2 * np.eye(fan_out), atol=1e-4 * max(gain ** 2, 1))
    else:                   # orthonormal rows
      m = np.asarray(kernel).reshape(fan_in, fan_out)
      np.testing.assert_allclose(m @ m.T, gain ** 2 * np.eye(fan_in), atol=1e-4)
  biases = [v for path, v in flat if path[-1].key == 'bias']
  assert biases and all(np.all(np.asarray(b) == 0) for b in biases)


def test_conv_kernel_is_orthogonal_over_its_receptive_field():
  """A [kh, kw, cin, cout] kernel is orthogonal as [kh kw cin, cout], as
  PyTorch's orthogonal_ on its [cout, cin kh kw] weight."""
  params = _variables('shallow', 'orthogonal', obs={'frames': np.zeros((4, 84, 84), np.uint8)})
  conv1 = params['params']['torso']['conv1']['kernel']
  assert conv1.shape == (8, 8, 4, 32)
  np.testing.assert_allclose(_gram(conv1), 2.0 * np.eye(32), atol=1e-4)


def test_lecun_is_the_modules_own_init_and_schemes_are_named():
  a = _variables('mlp', 'lecun')
  cfg = ml_collections.ConfigDict({'name': 'mlp', 'lstm_size': 0, 'torso_kwargs': {},
                                   'core_extra_inputs': False})
  network = agent_net.make_network(network_settings(cfg), num_actions=6, num_values=2)
  b = network.init(jax.random.key(0), {'state': np.zeros((1, 1, 4), np.float32)},
                   np.ones((1, 1), bool), ())
  jax.tree.map(np.testing.assert_array_equal, a['params'], b['params'])
  assert 'health' not in a
  with pytest.raises(ValueError, match='orthogonal'):
    init_lib.apply_init(a['params'], 'xavier', jax.random.key(0))


def test_orthogonal_depends_only_on_the_key():
  a = _variables('mlp', 'orthogonal')['params']
  b = _variables('mlp', 'orthogonal')['params']
  jax.tree.map(np.testing.assert_array_equal, a, b)
