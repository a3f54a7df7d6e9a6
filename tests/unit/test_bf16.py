"""network.dtype: the torso computes in bfloat16 while parameters, optimiser
state, PopArt statistics, the core, the heads and the losses stay float32;
'auto' is float32 on a CPU and bfloat16 on accelerators; and bfloat16 agents
still learn CartPole at two reward scales (PopArt) and Catch from pixels
(tests/learning/test_bf16_learning.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import cartpole_popart
from configs.validation import ConfigError, validate
from tests.support.network_examples import network, observations, variables
from networks import agent as agent_net


def test_auto_is_float32_on_cpu_and_bfloat16_on_accelerators():
  assert agent_net.compute_dtype('auto', 'cpu') == jnp.float32
  assert agent_net.compute_dtype('auto', 'gpu') == jnp.bfloat16
  assert agent_net.compute_dtype('auto', 'tpu') == jnp.bfloat16
  assert agent_net.compute_dtype('float32', 'tpu') == jnp.float32
  assert agent_net.compute_dtype('bfloat16', 'cpu') == jnp.bfloat16
  config = cartpole_popart.get_config()
  config.network.dtype = 'float16'
  with pytest.raises(ConfigError, match='network.dtype: .*choose one of auto, float32, bfloat16'):
    validate(config)


@pytest.mark.parametrize('key,kernels', [('shallow_centred', 'xla'), ('resnet', 'cpu'),
                                         ('resnet', 'xla'), ('nle_fast', 'cpu')])
def test_bfloat16_torso_float32_outputs_and_parameters(key, kernels):
  rng = np.random.default_rng(0)
  obs = observations(key, 2, 4, rng)
  first = np.ones((2, 4), bool)
  out = {}
  for dtype in ('float32', 'bfloat16'):
    net = network(key, kernels, dtype)
    tree = variables(net, obs, np.random.default_rng(1))
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(tree))

    def loss(params):
      logits, values, _ = net.apply({**tree, 'params': params}, obs, first,
                                    net.initial_state(4))
      return jnp.sum(logits) + jnp.sum(values), (logits, values)

    # Jitted, as the learner runs it (op by op it took 30 s for nle_fast).
    (_, (logits, values)), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(
        tree['params'])
    assert logits.dtype == values.dtype == jnp.float32
    assert all(g.dtype == jnp.float32 for g in jax.tree.leaves(grads))
    out[dtype] = np.asarray(logits)
    # The torso computes in the dtype; what follows it, in float32.
    intermediates = jax.jit(lambda v: net.apply(
        v, obs, first, net.initial_state(4), capture_intermediates=True,
        mutable=['intermediates']))(tree)[1]['intermediates']
    torso = next(v for k, v in intermediates.items() if k in ('torso', 'attention_core'))
    # Dense and conv layers' outputs (a layer returning its parameters, for a
    # fused op, returns a tuple and is left out).
    layer_outputs = [x for path, x in jax.tree_util.tree_leaves_with_path(torso)
                     if any(n in jax.tree_util.keystr(path) for n in ('fc', 'conv'))
                     and jax.tree_util.keystr(path).endswith("['__call__'][0]")]
    assert layer_outputs and all(x.dtype == jnp.dtype(dtype) for x in layer_outputs), key
    assert intermediates['policy_head']['__call__'][0].dtype == jnp.float32
  # bfloat16 keeps 8 bits of mantissa: the same function to about 1e-2, but not exactly.
  scale = np.abs(out['float32']).max()
  np.testing.assert_allclose(out['bfloat16'], out['float32'], rtol=0, atol=3e-2 * scale)
  assert not np.array_equal(out['bfloat16'], out['float32'])
