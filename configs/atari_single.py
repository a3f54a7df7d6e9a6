"""IMPALA (shallow Nature CNN) on one EnvPool Atari game.

  python launch/train.py --config=configs/atari_single.py:game=Pong
  python launch/train.py --config=configs/atari_single.py:game=Pong,smoke
"""

from configs import common


def atari_kwargs() -> dict:
  """IMPALA's Atari protocol on EnvPool: 84x84 grey, stack 4, repeat 4 with
  max-pool, up to 30 no-ops, end of episode on life loss (training), 108k
  frames per episode, rewards clipped in the learner (not in the env)."""
  return dict(episodic_life=True, reward_clip=False, noop_max=30,
              frame_skip=4, stack_num=4, img_height=84, img_width=84,
              max_episode_steps=27_000, repeat_action_probability=0.0)


def get_config(arg=None):
  variant = common.parse_variant(arg, {'game': 'Pong', 'smoke': False})
  c = common.base_config()
  c.config_name = f'atari_single_{variant["game"]}'
  c.total_env_steps = 50_000_000
  c.reward_mode = 'clip'
  c.network.name = 'shallow'
  c.tasks = (common.task(variant['game'], f'{variant["game"]}-v5', **atari_kwargs()),)
  c.actors.num_actors = 2
  c.actors.envs_per_actor = 16
  c.actors.envpool_threads = 2
  if variant['smoke']:
    common.apply_smoke(c)
  return c
