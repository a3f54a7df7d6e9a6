"""One agent on several Atari games at once, rewards clipped, no PopArt.

The seed's "multi-task" baseline: six games, the full 18-action set, one
shared policy and one value output; clipping is what keeps the games'
score scales from swamping each other.

  python launch/train.py --config=configs/atari_multitask.py
  python launch/train.py --config=configs/atari_multitask.py:games=Pong+Breakout
  python launch/train.py --config=configs/atari_multitask.py:smoke

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
  return atari_common.atari_config('atari_multitask', variant['games'], variant,
                                   popart=False, reward_mode='clip')
