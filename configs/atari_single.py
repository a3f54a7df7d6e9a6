"""IMPALA on one EnvPool Atari game (any of envs.atari.ATARI_GAMES).

  python launch/train.py --config=configs/atari_single.py:game=Pong
  python launch/train.py --config=configs/atari_single.py:game=Breakout,net=resnet,lstm
  python launch/train.py --config=configs/atari_single.py:game=Pong,smoke

Variants: game=<Game>, steps=<agent steps>, net=shallow|resnet|attention,
lstm (an LSTM 256 core for the CNNs),
recipe=vtrace|impala|impala_adam|a2c|ppo (configs/common.py
apply_recipe; vtrace, the default, is IMPALA's V-trace learner with
minibatch steps and centred frames, which learns Pong in 1M agent steps
here; impala is IMPALA's own table; docs/pong.md), smoke. Rewards are
clipped to [-1, 1]; one game uses its minimal action set unless
--config.atari.action_set=full.
"""

from configs import atari_common, common


def get_config(arg=None):
  """IMPALA on one Atari game, rewards clipped to [-1, 1].

  One task, named for the game, with the minimal action set unless
  atari.action_set says otherwise (configs/atari_common.atari_config).

  Args:
    arg: the variant text after the file name's ':' (common.parse_variant),
      None for the defaults. Keys: game (one of envs.atari.ATARI_GAMES;
      'Pong'), steps (agent steps; 0 keeps the recipe's budget), net
      ('shallow', 'resnet' or 'attention'; 'shallow'), lstm (an LSTM core
      for the CNNs; off), recipe (common.RECIPES; 'vtrace') and smoke
      (common.apply_smoke; off).

  Returns:
    The config (ml_collections.ConfigDict), named 'atari_single_<game>'.

  Raises:
    ValueError: for an unknown variant key or a bad value, or what
      atari_common.atari_config refuses (game, net, recipe, steps).
  """
  variant = common.parse_variant(arg, atari_common.variant_defaults(game='Pong'))
  game = variant['game']
  return atari_common.atari_config(f'atari_single_{game}', (game,), variant,
                                   popart=False, reward_mode='clip')
