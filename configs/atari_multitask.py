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
recipe=vtrace|ppo|impala|impala_adam|a2c, plain, smoke. The default recipe is
vtrace (configs/common.py apply_recipe), IMPALA's V-trace learner with
minibatch steps and centred frames: on Pong alone it passed -15 at about
0.5M agent steps (docs/pong.md). recipe=impala is IMPALA's own table.

With the vtrace recipe the arm is tuned as the PopArt arm is
(atari_common.apply_multitask_tuning, [26]): the clip per term, advantages
per task, balanced minibatches of about two unrolls per game, 5e-4 with a
warmup, annealed to half. `plain` leaves them out: the vtrace recipe's
table as it is (2.5e-4 annealed to 0, one global clip, advantages per
minibatch), the clipped runs before [26].
"""

from configs import atari_common, common


REWARDS = ('clip', 'none')


def get_config(arg=None):
  """One IMPALA agent on several Atari games, without PopArt, rewards clipped by default.

  One task per game (the full action set for several), one shared policy
  and one value output (configs/atari_common.atari_config).

  Args:
    arg: the variant text after the file name's ':' (common.parse_variant),
      None for the defaults. Keys: games (Atari games joined by '+'; the six
      SEED_GAMES), rewards ('clip' or 'none'; 'clip'), steps (agent steps
      per game; 0 keeps the recipe's budget), net ('shallow', 'resnet' or
      'attention'; 'shallow'), lstm (an LSTM core for the CNNs; off),
      recipe (common.RECIPES; 'vtrace'), plain (leave out
      atari_common.apply_multitask_tuning; off) and smoke
      (common.apply_smoke; off).

  Returns:
    The config (ml_collections.ConfigDict), named 'atari_multitask', or
    'atari_multitask_unclipped' with rewards=none.

  Raises:
    ValueError: for an unknown variant key or a bad value, an unknown
      rewards mode, or what atari_common.atari_config refuses (games, net,
      recipe, steps).
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
