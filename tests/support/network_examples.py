"""Small versions of every network, random inputs for them and their
variables: shared by the kernel and dtype tests."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from infra import settings
from networks import agent as agent_net
from networks import nethack
from networks.network_config import NetworkConfig

NUM_ACTIONS = 6

# name -> (lstm_size, centre_frames, torso_kwargs)
NETWORKS = {
    'shallow': (0, False, {}),
    'shallow_centred': (0, True, {}),
    'resnet': (0, True, {'channels': (8, 8), 'num_blocks': 1, 'hidden_size': 32}),
    'attention': (16, True, {'vision_channels': (8, 16), 'conv_lstm_channels': 16,
                             'query_hidden_size': 16}),
    'nle_simple': (0, False, {}),
    'nle_baseline': (8, False, {'channels': (8, 8, 4), 'hidden_size': 32}),
    'nle_fast': (8, False, {'channels': (8, 8, 4), 'hidden_size': 32}),
    'nle_attention': (8, False, {'channels': (8, 8, 8), 'hidden_size': 32}),
}


def network_settings(group) -> NetworkConfig:
  """A network group (a ConfigDict or dict of some fields; the rest default)
  read into its NetworkConfig, checked; a NetworkConfig as it is."""
  if isinstance(group, NetworkConfig):
    return group
  return settings.read(NetworkConfig, group, 'network')


def network(key, kernels='auto', dtype='float32'):
  """NETWORKS[key] as an AgentNetwork for two tasks."""
  lstm_size, centre, torso_kwargs = NETWORKS[key]
  cfg = ml_collections.ConfigDict({
      'name': key.replace('_centred', ''), 'lstm_size': lstm_size, 'torso_kwargs': torso_kwargs,
      'core_extra_inputs': True, 'centre_frames': centre, 'kernels': kernels, 'dtype': dtype})
  return agent_net.make_network(network_settings(cfg), NUM_ACTIONS, num_values=2, num_tasks=2)


def observations(key, t, b, rng):
  """Random observations [T, B, ...] for NETWORKS[key], with the policy inputs."""
  if key.startswith('nle'):
    glyphs = rng.integers(0, nethack.NLE_NUM_GLYPHS, (t, b, 21, 79)).astype(np.int32)
    blstats = rng.integers(0, 20, (t, b, 27)).astype(np.int32)
    obs = {'glyphs': glyphs, 'blstats': blstats}
  else:
    obs = {'frames': rng.integers(0, 256, (t, b, 4, 84, 84), dtype=np.uint8)}
  obs.update(prev_action=rng.integers(0, NUM_ACTIONS, (t, b)).astype(np.int32),
             prev_reward=rng.normal(size=(t, b)).astype(np.float32),
             task_id=rng.integers(0, 2, (t, b)).astype(np.int32))
  return obs


def variables(net, obs, rng):
  """Initial variables, with random mean frames where the network centres
  (zeros would leave the centring untested)."""
  example = jax.tree.map(lambda x: x[0, 0], obs)
  out = agent_net.init_variables(net, jax.random.key(0), example, init='orthogonal')

  def fill(path, leaf):
    if 'frame_centre' in jax.tree_util.keystr(path) and leaf.ndim == 3:
      return jnp.asarray(rng.uniform(0, 255, leaf.shape), leaf.dtype)
    return leaf
  return jax.tree_util.tree_map_with_path(fill, out)
