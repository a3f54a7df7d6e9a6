"""One agent on several Atari games at once, rewards clipped, no PopArt.

The seed's "multi-task" baseline: six games, the full 18-action set, one
shared policy and one value output; clipping is what keeps the games'
score scales from swamping each other.

  python launch/train.py --config=configs/atari_multitask.py
  python launch/train.py --config=configs/atari_multitask.py:games=Pong+Breakout
  python launch/train.py --config=configs/atari_multitask.py:smoke

Variants: games=<Game>+<Game>..., net=shallow|resnet|attention, lstm,
recipe=vtrace|ppo|impala|impala_adam|a2c, smoke. The default recipe is
vtrace (configs/common.py apply_recipe), IMPALA's V-trace learner with
minibatch steps and centred frames: on Pong alone it passed -15 at about
0.5M agent steps (docs/pong.md). recipe=impala is IMPALA's own table.
"""

from configs import atari_common, common


def get_config(arg=None):
  variant = common.parse_variant(
      arg, atari_common.variant_defaults(games=atari_common.SEED_GAMES))
  return atari_common.atari_config('atari_multitask', variant['games'], variant,
                                   popart=False, reward_mode='clip')
