"""network.dtype: the torso computes in bfloat16 while parameters, optimiser
state, PopArt statistics, the core, the heads and the losses stay float32;
'auto' is float32 on a CPU and bfloat16 on accelerators; and bfloat16 agents
still learn CartPole at two reward scales (PopArt) and Catch from pixels."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from analysis.run_loading import load_run
from configs import catch as catch_config
from configs import cartpole_popart
from configs.validation import ConfigError, validate
from networks import agent as agent_net
from training_runs import train_and_read

from test_kernels import NETWORKS, NUM_ACTIONS, _obs, _variables


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


@pytest.mark.parametrize('key', ['shallow_centred', 'resnet', 'nle_fast'])
def test_bfloat16_torso_float32_outputs_and_parameters(key):
  rng = np.random.default_rng(0)
  lstm_size, centre, torso_kwargs = NETWORKS[key]
  obs = _obs(key, 2, 4, rng)
  first = np.ones((2, 4), bool)
  out = {}
  for dtype in ('float32', 'bfloat16'):
    cfg = ml_collections.ConfigDict({
        'name': key.replace('_centred', ''), 'lstm_size': lstm_size,
        'torso_kwargs': torso_kwargs, 'core_extra_inputs': True, 'centre_frames': centre,
        'kernels': 'xla', 'dtype': dtype})
    net = agent_net.make_network(cfg, NUM_ACTIONS, num_values=2, num_tasks=2)
    variables = _variables(net, obs, np.random.default_rng(1))
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(variables))

    def loss(params):
      logits, values, _ = net.apply({**variables, 'params': params}, obs, first,
                                    net.initial_state(4))
      return jnp.sum(logits) + jnp.sum(values), (logits, values)

    (_, (logits, values)), grads = jax.value_and_grad(loss, has_aux=True)(variables['params'])
    assert logits.dtype == values.dtype == jnp.float32
    assert all(g.dtype == jnp.float32 for g in jax.tree.leaves(grads))
    out[dtype] = np.asarray(logits)
  # bfloat16 keeps 8 bits of mantissa: the same function to about 1e-2.
  scale = np.abs(out['float32']).max()
  np.testing.assert_allclose(out['bfloat16'], out['float32'], rtol=0, atol=3e-2 * scale)


@pytest.mark.learning
def test_bfloat16_popart_learns_both_reward_scales(tmp_path):
  config = cartpole_popart.get_config()
  config.network.dtype = 'bfloat16'
  records = train_and_read(config, tmp_path)
  best = {}
  for r in records:
    for task in ('cartpole_a', 'cartpole_b'):
      if r.get(f'episodes/{task}', 0) >= 10:
        best[task] = max(best.get(task, float('-inf')), r[f'episode_return/{task}'])
  assert best['cartpole_a'] >= 300 and best['cartpole_b'] / 1000.0 >= 300, best
  run = load_run(str(tmp_path / 'run'))
  assert run.network.dtype == jnp.bfloat16
  stats = jax.tree.leaves(run.variables['popart'])
  assert stats and all(x.dtype == jnp.float32 for x in stats)
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(run.variables['params']))
  assert records[-1]['popart/sigma/cartpole_b'] > 100 * records[-1]['popart/sigma/cartpole_a']


@pytest.mark.learning
def test_bfloat16_vtrace_learns_catch_from_pixels(tmp_path):
  config = catch_config.get_config('size=40,recipe=vtrace')
  config.network.dtype = 'bfloat16'
  config.total_env_steps = 200_000
  records = train_and_read(config, tmp_path)
  returns = [r['episode_return/Catch'] for r in records if r.get('episodes/Catch', 0) >= 50]
  assert returns and min(returns) < -0.3, returns   # it started near random play
  assert max(returns) >= 0.5, returns   # random play: about -0.6
