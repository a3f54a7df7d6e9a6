"""Multi-task PopArt on several Atari games, rewards NOT clipped.

The seed's main set-up (Hessel et al. 2019): six games, full action set, one
shared policy, one value output and one pair of PopArt statistics per game.

  python launch/train.py --config=configs/atari_popart.py
  python launch/train.py --config=configs/atari_popart.py:games=Pong+Breakout
  python launch/train.py --config=configs/atari_popart.py:smoke

Variants: games=<Game>+<Game>..., steps=<agent steps per game>,
net=shallow|resnet|attention, lstm,
recipe=vtrace|ppo|impala|impala_adam|a2c, slow_start, smoke. The default
recipe is vtrace (configs/common.py apply_recipe), IMPALA's V-trace learner
with minibatch steps and centred frames: on Pong alone it passed -15 at
about 0.5M agent steps (docs/pong.md). recipe=impala is IMPALA's own table.

With the vtrace recipe, multi-task PopArt without the slow start is the
default (atari_common.apply_multitask_popart, [21], docs/popart_atari.md):
the debiased start, the clip per term, advantages per task, balanced
minibatches of about two unrolls per game, 5e-4 with a warmup, annealed to
half. `slow_start` leaves them out: the PopArt runs before [21] (statistics
at mu 0, sigma 1, one global clip, advantages per minibatch, 2.5e-4
annealed to 0), the slow-start baseline kept in docs/data/popart_atari.

  python launch/train.py --config=configs/atari_popart.py:slow_start
"""

from configs import atari_common, common


def get_config(arg=None):
  """Multi-task PopArt IMPALA on several Atari games, rewards not clipped.

  One task per game (the full action set for several), one shared policy,
  and one value output and one pair of PopArt statistics per game (Hessel
  et al. 2019; configs/atari_common.atari_config).

  Args:
    arg: the variant text after the file name's ':' (common.parse_variant),
      None for the defaults. Keys: games (Atari games joined by '+'; the six
      SEED_GAMES), steps (agent steps per game; 0 keeps the recipe's
      budget), net ('shallow', 'resnet' or 'attention'; 'shallow'), lstm (an
      LSTM core for the CNNs; off), recipe (common.RECIPES; 'vtrace'),
      slow_start (leave out atari_common.apply_multitask_popart; off) and
      smoke (common.apply_smoke; off).

  Returns:
    The config (ml_collections.ConfigDict), named 'atari_popart'.

  Raises:
    ValueError: for an unknown variant key or a bad value, or what
      atari_common.atari_config refuses (games, net, recipe, steps).
  """
  variant = common.parse_variant(
      arg, atari_common.variant_defaults(games=atari_common.SEED_GAMES, slow_start=False))
  return atari_common.atari_config('atari_popart', variant['games'], variant,
                                   popart=True, reward_mode='none',
                                   multitask_popart=not variant['slow_start'])
