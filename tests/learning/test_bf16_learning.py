"""bfloat16 agents learn: CartPole at two reward scales (PopArt) and Catch
from pixels (V-trace), with the statistics, parameters and losses float32."""

import jax
import jax.numpy as jnp
import pytest

from analysis.run_loading import load_run
from configs import cartpole_popart
from configs import catch as catch_config
from tests.support.training_runs import train_and_read

pytestmark = pytest.mark.learning


@pytest.mark.slow  # the full suite only, not the CI tier (docs/testing.md): about 2 min; float32 PopArt stays in the CI tier (test_learning)
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


def test_bfloat16_vtrace_learns_catch_from_pixels(tmp_path):
  config = catch_config.get_config('size=40,recipe=vtrace')
  config.network.dtype = 'bfloat16'
  config.total_env_steps = 200_000
  records = train_and_read(config, tmp_path)
  returns = [r['episode_return/Catch'] for r in records if r.get('episodes/Catch', 0) >= 50]
  assert returns and min(returns) < -0.3, returns   # it started near random play
  assert max(returns) >= 0.5, returns   # random play: about -0.6
