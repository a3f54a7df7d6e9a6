"""Two CartPole-v1 tasks whose rewards differ in scale, learnt by one PopArt agent.

Rewards are multiplied by reward_scales and not clipped; PopArt normalises each task's values so
both learn (without it the large task swamps the small one):

  python launch/train.py --config=configs/cartpole_popart.py
  python launch/train.py --config=configs/cartpole_popart.py --config.popart.enabled=False
"""

from configs import common


def get_config(arg=None):
  """The config, named 'cartpole_popart'; variants: smoke (common.apply_smoke)."""
  variant = common.parse_variant(arg, {'smoke': False})
  c = common.base_config()
  c.config_name = 'cartpole_popart'
  c.total_env_steps = 1_000_000
  c.reward_mode = 'none'
  c.reward_scales = (1.0, 1000.0)   # per-task reward multipliers
  c.batch_size = 16
  c.learning_rate = 3e-3
  c.entropy_cost = 0.001
  c.popart.enabled = True
  c.network.name = 'mlp'
  c.tasks = (common.task('cartpole_a', 'CartPole-v1'),
             common.task('cartpole_b', 'CartPole-v1'))
  c.actors.num_actors = 1
  c.actors.envs_per_actor = 16    # 8 envs per task
  c.log.every_seconds = 5.0
  if variant['smoke']:
    common.apply_smoke(c)
  return c
