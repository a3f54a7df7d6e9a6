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
import numpy as np
import pytest

from configs import atari_single, cartpole, resume
from configs.validation import ConfigError, validate
from tests.support.network_examples import NETWORKS, NUM_ACTIONS, network, observations, variables
from networks import agent as agent_net
from networks import kernels


def _outputs_and_grads(net, tree, obs, first, with_health=False):
  """(outputs, gradients of a fixed linear function of the logits and values
  with respect to the params, the lowered program's text)."""
  apply = agent_net.apply_fn(net, with_health=with_health)
  b = first.shape[1]
  core = net.initial_state(b)
  weights = np.random.default_rng(1).normal(size=(first.shape[0], b, NUM_ACTIONS + 2))

  def loss(params):
    out = apply(params, tree['popart'][agent_net.VALUE_HEAD], obs, first, core)
    logits, values = out[0], out[1]
    return jnp.sum(weights[..., :NUM_ACTIONS] * logits) + jnp.sum(weights[..., NUM_ACTIONS:] * values), out

  lowered = jax.jit(jax.value_and_grad(loss, has_aux=True)).lower(tree['params'])
  (_, out), grads = lowered.compile()(tree['params'])
  return out, grads, lowered.as_text()


def _xla_ops(text):
  """XLA's own convolutions and pooling windows in a lowered program."""
  return text.count('stablehlo.convolution') + text.count('stablehlo.reduce_window')


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
  obs = observations(key, t, b, rng)
  first = np.zeros((t, b), bool)
  first[0] = True
  first[1, 0] = True
  cpu, xla = network(key, 'cpu'), network(key, 'xla')
  params = variables(xla, obs, rng)   # one set of parameters for both
  out_cpu, grads_cpu, text_cpu = _outputs_and_grads(cpu, params, obs, first)
  out_xla, grads_xla, text_xla = _outputs_and_grads(xla, params, obs, first)
  for a, b_ in zip(jax.tree.leaves(out_cpu), jax.tree.leaves(out_xla)):
    _close(a, b_, 2e-5)
  assert jax.tree.structure(grads_cpu) == jax.tree.structure(grads_xla)
  _close_trees(grads_cpu, grads_xla, 1e-3)
  # Gradients reach the conv layers on both paths.
  conv_grads = [g for path, g in jax.tree_util.tree_leaves_with_path(grads_xla)
                if 'conv' in jax.tree_util.keystr(path) and 'kernel' in jax.tree_util.keystr(path)]
  assert conv_grads and all(np.abs(g).max() > 0 for g in conv_grads)
  # And the two really are different programs: the CPU path's gradients are
  # matmuls, the XLA path's are convolutions.
  assert _xla_ops(text_xla) > _xla_ops(text_cpu)


def test_nature_cnn_health_maxima_agree():
  rng = np.random.default_rng(0)
  obs = observations('shallow_centred', 1, 20, rng)
  first = np.ones((1, 20), bool)
  cpu, xla = network('shallow_centred', 'cpu'), network('shallow_centred', 'xla')
  params = variables(xla, obs, rng)
  (*_, health_cpu), _, _ = _outputs_and_grads(cpu, params, obs, first, with_health=True)
  (*_, health_xla), _, _ = _outputs_and_grads(xla, params, obs, first, with_health=True)
  assert set(health_cpu) == set(health_xla) == {'conv1', 'conv2', 'conv3', 'fc'}
  for name in health_cpu:
    _close(health_cpu[name], health_xla[name], 2e-5)


def test_auto_is_the_cpu_path_when_lowered_for_cpu():
  rng = np.random.default_rng(0)
  obs = observations('shallow', 1, 20, rng)
  first = np.ones((1, 20), bool)
  auto, cpu = network('shallow', 'auto'), network('shallow', 'cpu')
  params = variables(cpu, obs, rng)
  out_auto, grads_auto, _ = _outputs_and_grads(auto, params, obs, first)
  out_cpu, grads_cpu, _ = _outputs_and_grads(cpu, params, obs, first)
  for a, b in zip(jax.tree.leaves((out_auto, grads_auto)), jax.tree.leaves((out_cpu, grads_cpu))):
    _close(a, b, 1e-6)
  # The CPU program holds none of XLA's convolutions, and 'xla' holds only them.
  apply = lambda net: jax.jit(lambda v, o, f: net.apply(v, o, f, ()))
  texts = {impl: apply(network('shallow', impl)).lower(params, obs, first).as_text()
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
  config = atari_single.get_config('game=Pong')
  config.network.torso_kwargs = {'dtype': 'bfloat16'}
  with pytest.raises(ConfigError, match=r"network.torso_kwargs: sets \['dtype'\], which come "
                                        r"from network.dtype"):
    validate(config)


def test_kernels_and_dtype_may_change_on_resume():
  config = atari_single.get_config('game=Pong')
  saved = resume.as_source(config)
  config.network.kernels = 'xla'
  config.network.dtype = 'bfloat16'
  frozen, allowed = resume.compare(saved, resume.as_source(config))
  assert not frozen and [d[0] for d in allowed] == ['network.dtype', 'network.kernels']
  config.network.lstm_size = 64   # the rest of network.* stays fixed
  assert [d[0] for d in resume.compare(saved, resume.as_source(config))[0]] == ['network.lstm_size']
