"""What the Atari experiments share: the game list, the network variants and the multi-task tuning.
IMPALA's protocol switches are the `atari` group (envs/atari.AtariConfig, in every config), built
into each task's EnvPool options at start, so `--config.atari.*` reaches every task."""

import ml_collections

from configs import common
from envs import atari
from networks import attention

SEED_GAMES = ('AirRaid', 'Carnival', 'DemonAttack', 'NameThisGame', 'Pong', 'SpaceInvaders')
NETWORKS = ('shallow', 'resnet', 'attention')


def atari_config(name: str, games, variant: dict, *, popart: bool,
                 reward_mode: str, multitask_popart: bool = False,
                 multitask_tuning: bool = False) -> ml_collections.ConfigDict:
  """A full IMPALA Atari config for `games`, one task per game in that order.

  `apply_multitask_popart` or `apply_multitask_tuning` (vtrace recipe only)
  come after the budget, which their schedule anneals over, and before smoke.

  Args:
    variant: the parsed variants (`variant_defaults`).

  Raises:
    ValueError: for no games, an unknown or repeated game, a net not in
      NETWORKS, an unknown recipe, or negative steps.
  """
  games = atari.check_games(games)
  if variant['net'] not in NETWORKS:
    raise ValueError(f'unknown Atari network {variant["net"]!r}; choose one of {", ".join(NETWORKS)}')
  c = common.base_config()
  c.config_name = name
  c.reward_mode = reward_mode
  c.popart.enabled = popart
  c.network.name = variant['net']
  # IMPALA: the LSTM core is optional for the CNNs; the attention agent is recurrent.
  c.network.lstm_size = 256 if (variant['lstm'] or variant['net'] == 'attention') else 0
  if variant['net'] == 'attention':
    # Its sizes, in the config so that flags and sweeps reach them
    # (--config.network.torso_kwargs.answer_sizes='(512,256)').
    c.network.torso_kwargs = attention.size_defaults()
  c.tasks = tuple(common.task(g, atari.env_id(g)) for g in games)
  # Actor threads and EnvPool threads: sized to the machine (configs/actor_sizing.py).
  if len(games) == 1:
    c.total_env_steps = 50_000_000   # 200M frames, IMPALA's single-task budget
    c.actors.envs_per_actor = 16
    c.batch_size = 32
  else:
    c.total_env_steps = 50_000_000 * len(games)  # the seed: 300M steps for six games
    # Up to 16 envs per actor, an even number of each game (at least 2): as
    # varied a batch as one game's, split over 2 or 4 learner devices.
    c.actors.envs_per_actor = len(games) * max(2, 16 // len(games) // 2 * 2)
    # IMPALA's batch of 32, rounded to whole actor blocks.
    c.batch_size = c.actors.envs_per_actor * max(1, round(32 / c.actors.envs_per_actor))
  common.apply_recipe(c, variant['recipe'])
  if variant['recipe'] in ('vtrace', 'a2c', 'ppo', 'impala_adam'):
    # 3M agent steps per game: what a 2-core CPU runs in hours.
    c.total_env_steps = 3_000_000 * len(games)
  if variant['steps']:
    if variant['steps'] < 0:
      raise ValueError(f'steps={variant["steps"]}: agent steps per game must be > 0')
    c.total_env_steps = variant['steps'] * len(games)   # the learning rate anneals over it
  if multitask_popart and variant['recipe'] == 'vtrace':
    apply_multitask_popart(c)
  elif multitask_tuning and variant['recipe'] == 'vtrace':
    apply_multitask_tuning(c)
  if variant['smoke']:
    common.apply_smoke(c)
  return c


def apply_multitask_popart(c: ml_collections.ConfigDict) -> None:
  """`apply_multitask_tuning` with PopArt's debiased start (statistics scaled
  from the first batches); docs/popart_atari.md."""
  apply_multitask_tuning(c)
  c.popart.start = 'debiased'


def apply_multitask_tuning(c: ml_collections.ConfigDict) -> None:
  """What every multi-task arm takes on the vtrace recipe."""
  tasks, b = len(c.tasks), c.batch_size
  c.optimizer.clip_by = 'term'
  c.vtrace.normalize_advantages_per = 'task'
  # About two unrolls of every task (at least about 4) per minibatch; each
  # learner device cuts its shard into them, on 1, 2 or 4 learner devices.
  c.vtrace.minibatches = common.minibatch_count(b, max(4, 2 * tasks), devices=(1, 2, 4))
  c.vtrace.balance_tasks = c.vtrace.minibatches > 1
  c.learning_rate = 5e-4
  c.optimizer.warmup_updates = 200
  c.optimizer.anneal_to = 0.5


def variant_defaults(**extra) -> dict:
  """The Atari variants' defaults for common.parse_variant (net, lstm, smoke,
  recipe, steps: agent steps per game, 0 = the recipe's), then `extra`'s."""
  return {'net': 'shallow', 'lstm': False, 'smoke': False, 'recipe': 'vtrace', 'steps': 0,
          **extra}
