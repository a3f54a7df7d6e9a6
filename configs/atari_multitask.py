"""One agent on several Atari games at once, no PopArt, rewards clipped.

  python launch/train.py --config=configs/atari_multitask.py
  python launch/train.py --config=configs/atari_multitask.py:games=Pong+Breakout
  python launch/train.py --config=configs/atari_multitask.py:games=Pong+Carnival,rewards=none,steps=1500000
  python launch/train.py --config=configs/atari_multitask.py:smoke

The seed's multi-task baseline: the full action set, one shared policy and one value output;
clipping keeps the games' score scales from swamping each other (rewards=none: what PopArt is for).
"""

from configs import atari_common, common


REWARDS = ('clip', 'none')


def get_config(arg=None):
  """The config, named 'atari_multitask' ('atari_multitask_unclipped' with rewards=none).

  Args:
    arg: the variants (common.parse_variant), None for the defaults:
      games: Atari games joined by '+' (SEED_GAMES).
      rewards: 'clip' or 'none' ('clip').
      plain: leave out atari_common.apply_multitask_tuning (off).
      steps, net, lstm, recipe, smoke: atari_common.variant_defaults.
  """
  variant = common.parse_variant(
      arg, atari_common.variant_defaults(games=atari_common.SEED_GAMES, rewards='clip',
                                         plain=False))
  if variant['rewards'] not in REWARDS:
    raise ValueError(f'unknown rewards={variant["rewards"]!r}; choose one of {", ".join(REWARDS)}')
  name = 'atari_multitask' + ('_unclipped' if variant['rewards'] == 'none' else '')
  return atari_common.atari_config(name, variant['games'], variant,
                                   popart=False, reward_mode=variant['rewards'],
                                   multitask_tuning=not variant['plain'])
