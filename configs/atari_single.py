"""IMPALA on one EnvPool Atari game, rewards clipped to [-1, 1].

  python launch/train.py --config=configs/atari_single.py:game=Pong
  python launch/train.py --config=configs/atari_single.py:game=Breakout,net=resnet,lstm
  python launch/train.py --config=configs/atari_single.py:game=Pong,smoke
"""

from configs import atari_common, common


def get_config(arg=None):
  """The config, named 'atari_single_<game>'; the game's minimal action set
  unless atari.action_set says otherwise.

  Args:
    arg: the variants (common.parse_variant), None for the defaults:
      game: one of envs.atari.ATARI_GAMES ('Pong').
      steps, net, lstm, recipe, smoke: atari_common.variant_defaults.
  """
  variant = common.parse_variant(arg, atari_common.variant_defaults(game='Pong'))
  game = variant['game']
  return atari_common.atari_config(f'atari_single_{game}', (game,), variant,
                                   popart=False, reward_mode='clip')
