"""IMPALA on Catch from pixels (envs/catch.py): the pixel pipeline's control task.

Catch-pixels gives the Atari path's observations (uint8 [4, H, W] stacked
frames, newest last) and is read by the same Nature CNN ('shallow'), but it is
learnt in minutes on a CPU. A run that learns Catch and not an Atari game
points at the game (or the budget); one that fails Catch too points at the
pixel pipeline.

  python launch/train.py --config=configs/catch.py
  python launch/train.py --config=configs/catch.py:recipe=impala
  python launch/train.py --config=configs/catch.py:size=40
  python launch/train.py --config=configs/catch.py:smoke
  python launch/train.py --config=configs/catch.py:pong,recipe=vtrace

Variants: recipe=a2c|impala|vtrace|... (configs/common.py apply_recipe;
default a2c), size=<frame height and width in pixels, >= 36; default 84>,
pong (Catch with Pong's difficulties, envs/catch.pong_like: a grey
background filling the frame, small blocks, a reward every 9 steps),
smoke.

With recipe=a2c the policy stays at random for ~1,250 updates (~100k agent
steps) while RMSProp's second moment forgets its start at 1, then reaches
returns >= 0.8 within ~20-30k steps (measured on 40x40 frames; random play
scores about -0.6).
"""

from configs import common
from envs import catch


def get_config(arg=None):
  """IMPALA on Catch from pixels, read by the Nature CNN as Atari frames are.

  One task, 300k agent steps, rewards clipped as for Atari.

  Args:
    arg: the variant text after the file name's ':' (common.parse_variant),
      None for the defaults. Keys: recipe (common.RECIPES; 'a2c'), size (the
      frame's height and width in pixels; 84; start-up refuses below 36),
      pong (Catch with Pong's difficulties, envs/catch.pong_like; off) and
      smoke (common.apply_smoke; off).

  Returns:
    The config (ml_collections.ConfigDict), named 'catch_<recipe>', or
    'catch_pong_<recipe>' with pong.

  Raises:
    ValueError: for an unknown variant key or a bad value, or an unknown
      recipe.
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
