"""IMPALA on EnvPool CartPole-v1: the fastest check that the agent learns.

  python launch/train.py --config=configs/cartpole.py
  python launch/train.py --config=configs/cartpole.py:smoke
"""

from configs import common


def get_config(arg=None):
  """The config, named 'cartpole'; variants: smoke (common.apply_smoke)."""
  variant = common.parse_variant(arg, {'smoke': False})
  c = common.base_config()
  c.config_name = 'cartpole'
  c.total_env_steps = 500_000
  c.reward_mode = 'none'        # CartPole's +1 per step is already in [-1, 1]
  # Tuned for CartPole (IMPALA's Atari values learn it too slowly): more,
  # smaller updates at a higher rate, little entropy regularisation.
  c.batch_size = 16
  c.learning_rate = 3e-3
  c.entropy_cost = 0.001
  c.network.name = 'mlp'
  c.tasks = (common.task('CartPole', 'CartPole-v1'),)
  c.actors.num_actors = 1
  c.actors.envs_per_actor = 8
  c.log.every_seconds = 5.0
  if variant['smoke']:
    common.apply_smoke(c)
  return c
