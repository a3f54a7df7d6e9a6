"""Multi-task PopArt on several Atari games, rewards not clipped.

Hessel et al. 2019: one shared policy, one value output and one pair of PopArt statistics per game.

  python launch/train.py --config=configs/atari_popart.py
  python launch/train.py --config=configs/atari_popart.py:games=Pong+Breakout
  python launch/train.py --config=configs/atari_popart.py:slow_start
  python launch/train.py --config=configs/atari_popart.py:smoke
"""

from configs import atari_common, common


def get_config(arg=None):
  """Multi-task PopArt IMPALA on Atari games: the config, named 'atari_popart'.

  Args:
    arg: the variants (common.parse_variant), None for the defaults:
      games: Atari games joined by '+' (SEED_GAMES).
      slow_start: leave out atari_common.apply_multitask_popart (off):
        PopArt from mu 0, sigma 1 (docs/popart_atari.md).
      steps, net, lstm, recipe, smoke: atari_common.variant_defaults.
  """
  variant = common.parse_variant(
      arg, atari_common.variant_defaults(games=atari_common.SEED_GAMES, slow_start=False))
  return atari_common.atari_config('atari_popart', variant['games'], variant,
                                   popart=True, reward_mode='none',
                                   multitask_popart=not variant['slow_start'])
