"""IMPALA on Catch from pixels (envs/catch.py): the pixel pipeline's control task.

It gives the Atari path's observations (uint8 [4, H, W] frames) to the same Nature CNN but learns in
minutes on a CPU: a run that learns Catch and not a game points at the game; one that fails Catch
too points at the pixel pipeline.

  python launch/train.py --config=configs/catch.py
  python launch/train.py --config=configs/catch.py:pong,recipe=vtrace
  python launch/train.py --config=configs/catch.py:smoke
"""

from configs import common
from envs import catch


def get_config(arg=None):
  """The config, named 'catch_<recipe>' ('catch_pong_<recipe>' with pong).

  Args:
    arg: the variants (common.parse_variant), None for the defaults:
      recipe: a key of common.RECIPES ('a2c').
      size: frame height and width in pixels, at least 36 (84).
      pong: Catch with Pong's difficulties, envs/catch.pong_like (off).
      smoke: common.apply_smoke (off).
  """
  variant = common.parse_variant(arg, {'recipe': 'a2c', 'size': 84, 'smoke': False,
                                       'pong': False})
  c = common.base_config()
  c.config_name = f'catch_{"pong_" if variant["pong"] else ""}{variant["recipe"]}'
  c.total_env_steps = 300_000     # a2c: ~100k steps at random (RMSProp warm-up), then learns
  c.reward_mode = 'clip'          # as for Atari (Catch's rewards are already +-1)
  c.network.name = 'shallow'      # the Nature CNN, exactly as for Atari
  kwargs = (catch.pong_like(variant['size']) if variant['pong'] else
            {'img_height': variant['size'], 'img_width': variant['size']})
  c.tasks = (common.task('Catch', catch.ENV_ID, **kwargs),)
  c.actors.num_actors = 1
  c.actors.envs_per_actor = 16
  c.log.every_seconds = 5.0       # a window holds ~100s of 9-step episodes
  common.apply_recipe(c, variant['recipe'])
  if variant['smoke']:
    common.apply_smoke(c)
  return c
