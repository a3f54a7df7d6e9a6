"""Multi-task PopArt on several Atari games, rewards NOT clipped.

The seed's main set-up (Hessel et al. 2019): six games, full action set, one
shared policy, one value output and one pair of PopArt statistics per game.

  python launch/train.py --config=configs/atari_popart.py
  python launch/train.py --config=configs/atari_popart.py:games=Pong+Breakout
  python launch/train.py --config=configs/atari_popart.py:smoke

Variants: games=<Game>+<Game>..., net=shallow|resnet|attention, lstm,
recipe=ppo|impala|impala_adam|a2c, smoke. The default recipe is PPO
(configs/common.py apply_recipe): on Pong it reached -15 in about 0.66M
agent steps where IMPALA's table stayed at random past 1M (docs/atari.md).
recipe=impala is IMPALA's own table.
"""

from configs import atari_common, common


def get_config(arg=None):
  variant = common.parse_variant(
      arg, atari_common.variant_defaults(games=atari_common.SEED_GAMES, recipe='ppo'))
  return atari_common.atari_config('atari_popart', variant['games'], variant,
                                   popart=True, reward_mode='none')
