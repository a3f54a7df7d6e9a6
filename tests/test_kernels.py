"""networks/kernels.py: every network's CPU-tuned path and its XLA path are
the same function (outputs, gradients and health maxima), with parameters
that load into either; 'auto' is the CPU path when lowered for CPU; and the
choice is checked at start and may change on resume.

Tolerances: float32 sums taken in another order. Outputs agree to 2e-5 and
gradients to 1e-3 of the largest magnitude of their leaf (or of 1e-3 of the
largest leaf, for a leaf whose gradient nearly cancels).
"""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from configs import atari_single, cartpole, resume
from configs.validation import ConfigError, validate
from networks import agent as agent_net
from networks import kernels
from networks import nethack

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


def _network(key, impl):
  lstm_size, centre, torso_kwargs = NETWORKS[key]
  cfg = ml_collections.ConfigDict({
      'name': key.replace('_centred', ''), 'lstm_size': lstm_size, 'torso_kwargs': torso_kwargs,
      'core_extra_inputs': True, 'centre_frames': centre, 'kernels': impl})
  return agent_net.make_network(cfg, NUM_ACTIONS, num_values=2, num_tasks=2)


def _obs(key, t, b, rng):
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


def _variables(network, obs, rng):
  """Initial variables, with random mean frames where the network centres
  (zeros would leave the centring untested)."""
  example = jax.tree.map(lambda x: x[0, 0], obs)
  variables = agent_net.init_variables(network, jax.random.key(0), example, init='orthogonal')

  def fill(path, leaf):
    if 'frame_centre' in jax.tree_util.keystr(path) and leaf.ndim == 3:
      return jnp.asarray(rng.uniform(0, 255, leaf.shape), leaf.dtype)
    return leaf
  return jax.tree_util.tree_map_with_path(fill, variables)


def _outputs_and_grads(network, variables, obs, first, with_health=False):
  apply = agent_net.apply_fn(network, with_health=with_health)
  b = first.shape[1]
  core = network.initial_state(b)
  weights = np.random.default_rng(1).normal(size=(first.shape[0], b, NUM_ACTIONS + 2))

  def loss(params):
    out = apply(params, variables['popart'][agent_net.VALUE_HEAD], obs, first, core)
    logits, values = out[0], out[1]
    return jnp.sum(weights[..., :NUM_ACTIONS] * logits) + jnp.sum(weights[..., NUM_ACTIONS:] * values), out

  (_, out), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(variables['params'])
  return out, grads


def _close(a, b, tol, scale=0.0):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  assert a.shape == b.shape
  np.testing.assert_allclose(a, b, rtol=0, atol=tol * max(np.abs(b).max(), scale, 1e-6))


def _close_trees(a, b, tol):
  scale = 1e-3 * max(float(np.abs(x).max()) for x in jax.tree.leaves(b))
  jax.tree.map(lambda x, y: _close(x, y, tol, scale), a, b)


@pytest.mark.parametrize('key', sorted(NETWORKS))
def test_cpu_and_xla_paths_are_the_same_function(key):
  rng = np.random.default_rng(0)
  # The Nature CNN's fused op runs 16 frames per chunk: 20 frames are a
  # chunk and a remainder.
  t, b = (2, 10) if key.startswith('shallow') else (2, 2)
  obs = _obs(key, t, b, rng)
  first = np.zeros((t, b), bool)
  first[0] = True
  first[1, 0] = True
  cpu, xla = _network(key, 'cpu'), _network(key, 'xla')
  variables = _variables(xla, obs, rng)   # one set of parameters for both
  out_cpu, grads_cpu = _outputs_and_grads(cpu, variables, obs, first)
  out_xla, grads_xla = _outputs_and_grads(xla, variables, obs, first)
  for a, b_ in zip(jax.tree.leaves(out_cpu), jax.tree.leaves(out_xla)):
    _close(a, b_, 2e-5)
  assert jax.tree.structure(grads_cpu) == jax.tree.structure(grads_xla)
  _close_trees(grads_cpu, grads_xla, 1e-3)
  # Gradients reach the conv layers on both paths.
  conv_grads = [g for path, g in jax.tree_util.tree_leaves_with_path(grads_xla)
                if 'conv' in jax.tree_util.keystr(path) and 'kernel' in jax.tree_util.keystr(path)]
  assert conv_grads and all(np.abs(g).max() > 0 for g in conv_grads)


def test_nature_cnn_health_maxima_agree():
  rng = np.random.default_rng(0)
  obs = _obs('shallow_centred', 1, 20, rng)
  first = np.ones((1, 20), bool)
  cpu, xla = _network('shallow_centred', 'cpu'), _network('shallow_centred', 'xla')
  variables = _variables(xla, obs, rng)
  (*_, health_cpu), _ = _outputs_and_grads(cpu, variables, obs, first, with_health=True)
  (*_, health_xla), _ = _outputs_and_grads(xla, variables, obs, first, with_health=True)
  assert set(health_cpu) == set(health_xla) == {'conv1', 'conv2', 'conv3', 'fc'}
  for name in health_cpu:
    _close(health_cpu[name], health_xla[name], 2e-5)


def test_auto_is_the_cpu_path_when_lowered_for_cpu():
  rng = np.random.default_rng(0)
  obs = _obs('shallow', 1, 20, rng)
  first = np.ones((1, 20), bool)
  auto, cpu = _network('shallow', 'auto'), _network('shallow', 'cpu')
  variables = _variables(cpu, obs, rng)
  out_auto, grads_auto = _outputs_and_grads(auto, variables, obs, first)
  out_cpu, grads_cpu = _outputs_and_grads(cpu, variables, obs, first)
  for a, b in zip(jax.tree.leaves((out_auto, grads_auto)), jax.tree.leaves((out_cpu, grads_cpu))):
    _close(a, b, 1e-6)
  # The CPU program holds none of XLA's convolutions, and 'xla' holds only them.
  apply = lambda net: jax.jit(lambda v, o, f: net.apply(v, o, f, ()))
  texts = {impl: apply(_network('shallow', impl)).lower(variables, obs, first).as_text()
           for impl in ('auto', 'xla')}
  assert texts['auto'].count('stablehlo.convolution') == 0
  assert texts['xla'].count('stablehlo.convolution') == 3


def test_select_dispatches_and_names_the_choices():
  cpu, xla = (lambda x: x + 1), (lambda x: x + 2)
  assert kernels.select('cpu', cpu, xla, 1) == 2 and kernels.select('xla', cpu, xla, 1) == 3
  assert int(jax.jit(lambda x: kernels.select('auto', cpu, xla, x))(1)) == 2   # lowered for CPU
  with pytest.raises(ValueError, match="unknown kernels 'gpu'; choose one of auto, cpu, xla"):
    kernels.select('gpu', cpu, xla, 1)


def test_config_field_is_checked_at_start():
  config = atari_single.get_config('game=Pong')
  config.network.kernels = 'cuda'
  with pytest.raises(ConfigError, match=r'network.kernels: .*cuda.* choose one of auto, cpu, xla'):
    validate(config)
  config = cartpole.get_config()
  config.network.kernels = 'xla'
  with pytest.raises(ConfigError, match="network.kernels: network 'mlp' has no convolutions"):
    validate(config)
  config.network.kernels = 'auto'
  validate(config)


def test_kernels_may_change_on_resume():
  config = atari_single.get_config('game=Pong')
  saved = resume._as_dict(config)
  config.network.kernels = 'xla'
  frozen, allowed = resume.compare(saved, config)
  assert not frozen and [d[0] for d in allowed] == ['network.kernels']


def test_a_checkpoint_trained_on_the_cpu_path_evaluates_and_resumes_on_the_xla_path(tmp_path):
  import dataclasses
  from analysis.run_loading import load_run
  from launch.train import train
  config = atari_single.get_config('game=Pong,smoke')   # the fused Nature CNN on CPU
  config.workdir = str(tmp_path / 'run')
  _, workdir = train(config)
  run = load_run(workdir)
  assert run.network.kernels == 'auto'
  rng = np.random.default_rng(0)
  obs = {'frames': rng.integers(0, 256, (1, 20, 4, 84, 84), dtype=np.uint8),
         'prev_action': np.zeros((1, 20), np.int32), 'prev_reward': np.zeros((1, 20), np.float32),
         'task_id': np.zeros((1, 20), np.int32)}
  first = np.ones((1, 20), bool)
  logits = {impl: dataclasses.replace(run.network, kernels=impl).apply(
      run.variables, obs, first, ())[0] for impl in ('cpu', 'xla')}
  _close(logits['cpu'], logits['xla'], 2e-5)
  # Resumed with the other kernels (a field free to change): it trains on.
  steps = config.total_env_steps
  config.network.kernels = 'xla'
  config.total_env_steps = 2 * steps
  state, _ = train(config)
  assert state is not None and load_run(workdir).env_steps >= 2 * steps
  assert load_run(workdir).config.network.kernels == 'xla'
