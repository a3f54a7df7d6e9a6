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
  variant = common.parse_variant(arg, atari_common.variant_defaults(game='Pong'))
  game = variant['game']
  return atari_common.atari_config(f'atari_single_{game}', (game,), variant,
                                   popart=False, reward_mode='clip')
