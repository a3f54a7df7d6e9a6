"""What the three Atari experiments share: IMPALA's protocol switches, the
game list, and the network variants.

The EnvPool options themselves are built from the `atari` group in one
place, `envs/atari.py`, when the run starts; so `--config.atari.*`
overrides (and sweeps) reach every task.
"""

import ml_collections

from configs import common
from envs import atari
from infra import settings
from networks import attention

SEED_GAMES = ('AirRaid', 'Carnival', 'DemonAttack', 'NameThisGame', 'Pong', 'SpaceInvaders')
NETWORKS = ('shallow', 'resnet', 'attention')


def atari_group() -> ml_collections.ConfigDict:
  """The `atari` group of envs/atari.AtariConfig's defaults.

  Returns:
    A new ConfigDict of every AtariConfig field at its default.
  """
  return settings.config_dict(atari.AtariConfig)


def atari_config(name: str, games, variant: dict, *, popart: bool,
                 reward_mode: str, multitask_popart: bool = False,
                 multitask_tuning: bool = False) -> ml_collections.ConfigDict:
  """A full IMPALA Atari config for `games`.

  One task per game, named for it, with task ids in the order given; the
  `atari` group at its defaults; network, LSTM, recipe, step budget and
  smoke from `variant`. One game: 16 envs per actor and a batch of 32;
  several: up to 16 envs per actor, an even number (at least 2) of each
  game, and a batch of about 32 unrolls in whole actor blocks. The budget
  is IMPALA's 50M agent steps per game, 3M per game with the recipes vtrace,
  a2c, ppo and impala_adam, or `variant['steps']` per game where that is
  set. With `multitask_popart` and the vtrace recipe,
  `apply_multitask_popart` after the budget (so its learning-rate schedule
  anneals over it) and before smoke; with `multitask_tuning` (an arm without
  PopArt) `apply_multitask_tuning` alone, the same way.

  Args:
    name: the config's name (config_name).
    games: Atari game names (envs/atari.ATARI_GAMES), in task order.
    variant: the parsed variants (`variant_defaults`): 'net', 'lstm',
      'recipe', 'steps' and 'smoke'.
    popart: whether PopArt is on (popart.enabled).
    reward_mode: the config's reward_mode ('clip', 'none' or 'h').
    multitask_popart: apply `apply_multitask_popart` (with the vtrace
      recipe only; the other recipes keep their own tables).
    multitask_tuning: apply `apply_multitask_tuning` (the vtrace recipe only).

  Returns:
    The config (ml_collections.ConfigDict).

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
  c.atari = atari_group()
  c.network.name = variant['net']
  # IMPALA: the LSTM core is optional for the CNNs; the attention agent is recurrent.
  c.network.lstm_size = 256 if (variant['lstm'] or variant['net'] == 'attention') else 0
  if variant['net'] == 'attention':
    # Its sizes, in the config so that flags and sweeps reach them
    # (--config.network.torso_kwargs.answer_sizes='(512,256)').
    c.network.torso_kwargs = attention.size_defaults()
  c.tasks = tuple(common.task(g, atari.env_id(g)) for g in games)
  # Actor threads and EnvPool threads: sized to the machine (configs/actor_sizing.py;
  # 2 threads x 2 EnvPool threads for one game on 2 cores).
  if len(games) == 1:
    c.total_env_steps = 50_000_000   # 200M frames, IMPALA's single-task budget
    c.actors.envs_per_actor = 16
    c.batch_size = 32
  else:
    c.total_env_steps = 50_000_000 * len(games)  # the seed: 300M steps for six games
    # Up to 16 envs per actor as for one game, an even number of each game
    # (at least 2): as many envs feed a batch, so its unrolls are as varied,
    # and the batch splits over 2 or 4 learner devices. (Two of each game
    # per actor left two games 8 envs in all, and each batch 4 rounds of
    # the same 8 games.) Two games: 16 per actor; three: 12; six: 12.
    c.actors.envs_per_actor = len(games) * max(2, 16 // len(games) // 2 * 2)
    # IMPALA's batch of 32, rounded to whole actor blocks.
    c.batch_size = c.actors.envs_per_actor * max(1, round(32 / c.actors.envs_per_actor))
  common.apply_recipe(c, variant['recipe'])
  if variant['recipe'] in ('vtrace', 'a2c', 'ppo', 'impala_adam'):
    # 3M agent steps per game: what a 2-core CPU runs in hours; the learning
    # rate anneals over it (to 0 unless optimizer.anneal_to says otherwise).
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
  """Multi-task PopArt without the slow start, on the vtrace recipe ([21]).

  `apply_multitask_tuning`, and PopArt statistics that take their scale from
  the first batches (the debiased start). Measured against clipped rewards
  on two and six games in docs/popart_atari.md.

  Args:
    c: a config with its tasks, batch and vtrace recipe set (unlocked).
  """
  apply_multitask_tuning(c)
  c.popart.start = 'debiased'


def apply_multitask_tuning(c: ml_collections.ConfigDict) -> None:
  """What the separating runs of [21] kept for several tasks on the vtrace
  recipe, and what every multi-task arm takes alike ([26]): the 0.5 clip
  applied to the policy and the value term each (`optimizer.clip_by='term'`),
  advantages normalised per task, minibatches that hold about two unrolls
  of every task, dealt out evenly (at least about 4 unrolls each: six games'
  batch of 36 gives 3 minibatches of 12, two games' 32 gives 8 of 4; a count
  that splits the batch on 1, 2 or 4 learner devices), learning rate 5e-4
  after a warmup of 200 updates, annealed to half of it (not to 0) over the
  budget.

  Args:
    c: a config with its tasks, batch and vtrace recipe set (unlocked).
  """
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
  """The Atari variants and their defaults, for common.parse_variant.

  Args:
    **extra: an experiment's own variants and their defaults (e.g.
      games=SEED_GAMES); they are added to, or replace, the shared ones.

  Returns:
    Variant name -> default: net 'shallow', lstm False, smoke False, recipe
    'vtrace', steps 0 (agent steps per game; 0 keeps the recipe's budget),
    then `extra`.
  """
  return {'net': 'shallow', 'lstm': False, 'smoke': False, 'recipe': 'vtrace', 'steps': 0,
          **extra}
