"""One agent on several Atari games at once, no PopArt, rewards clipped.

The seed's "multi-task" baseline: six games, the full 18-action set, one
shared policy and one value output; clipping is what keeps the games'
score scales from swamping each other. `rewards=none` leaves them
unclipped (without PopArt: the comparison that shows what PopArt is for).

  python launch/train.py --config=configs/atari_multitask.py
  python launch/train.py --config=configs/atari_multitask.py:games=Pong+Breakout
  python launch/train.py --config=configs/atari_multitask.py:games=Pong+Carnival,rewards=none,steps=1500000
  python launch/train.py --config=configs/atari_multitask.py:smoke

Variants: games=<Game>+<Game>..., rewards=clip|none, steps=<agent steps per
game>, net=shallow|resnet|attention, lstm,
recipe=vtrace|ppo|impala|impala_adam|a2c, smoke. The default recipe is
vtrace (configs/common.py apply_recipe), IMPALA's V-trace learner with
minibatch steps and centred frames: on Pong alone it passed -15 at about
0.5M agent steps (docs/pong.md). recipe=impala is IMPALA's own table.
"""

from configs import atari_common, common


REWARDS = ('clip', 'none')


def get_config(arg=None):
  variant = common.parse_variant(
      arg, atari_common.variant_defaults(games=atari_common.SEED_GAMES, rewards='clip'))
  if variant['rewards'] not in REWARDS:
    raise ValueError(f'unknown rewards={variant["rewards"]!r}; choose one of {", ".join(REWARDS)}')
  name = 'atari_multitask' + ('_unclipped' if variant['rewards'] == 'none' else '')
  return atari_common.atari_config(name, variant['games'], variant,
                                   popart=False, reward_mode=variant['rewards'])
