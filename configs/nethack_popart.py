"""The main job: one PopArt IMPALA agent across NetHack characters on NLE.

  python launch/train.py --config=configs/nethack_popart.py
  python launch/train.py --config=configs/nethack_popart.py:task=Staircase,chars=val-dwa-law-fem+wiz-elf-cha-mal
  python launch/train.py --config=configs/nethack_popart.py:chars=@
  python launch/train.py --config=configs/nethack_popart.py:recipe=nle,net=nle_baseline
  python launch/train.py --config=configs/nethack_popart.py:popart=false
  python launch/train.py --config=configs/nethack_popart.py:smoke

Each character is a task with its own PopArt statistics and value output (popart=false, the
ablation: one shared value output); rewards (in-game score deltas) are not clipped. Characters are
checked against NetHack's rules here: NLE would silently play another one. chars=@ plays random
characters as NetHackChallenge does: one task per role (envs.nethack.ROLES order), each episode
counting for the role dealt. docs/nethack.md.
"""

from configs import common
from envs import nethack
from networks import torsos

NLE_TASKS = {
    'Score': 'NetHackScore-v0', 'Staircase': 'NetHackStaircase-v0',
    'StaircasePet': 'NetHackStaircasePet-v0', 'Oracle': 'NetHackOracle-v0',
    'Gold': 'NetHackGold-v0', 'Eat': 'NetHackEat-v0', 'Scout': 'NetHackScout-v0',
    'Challenge': 'NetHackChallenge-v0',
}
DEFAULT_CHARS = ('mon-hum-neu-mal', 'val-dwa-law-fem', 'wiz-elf-cha-mal', 'tou-hum-neu-fem')
ENVS_PER_CHAR = 8        # envs (and batch unrolls) per fixed character
ENVS_PER_ROLE = 4        # with chars=@: 52 envs for the 13 role tasks
# net= choices -> LSTM core size (0: feed-forward).
NETWORK_LSTM_SIZES = {'nle_fast': 512, 'nle_simple': 0, 'nle_baseline': 512, 'nle_attention': 512}
# What the network reads beside glyphs and blstats (network.extra_inputs;
# networks/nethack.py): the message line and the glyph under the hero.
DEFAULT_INPUTS = ('message', 'under_hero')


RECIPES = {}  # name -> recipe(config), applied by common.apply_recipe


@common.recipe(RECIPES, 'fast')
def _fast(c) -> None:
  """The default; discount 0.999: a descent found many steps ahead still counts."""
  c.learning_rate = 2e-4
  c.optimizer.rmsprop_eps = 1e-6
  c.popart.beta = 3e-3
  c.entropy_cost = 1e-3
  c.discount = 0.999


@common.recipe(RECIPES, 'impala')
def _impala(c) -> None:
  """IMPALA's Atari table: common.base_config's values."""


@common.recipe(RECIPES, 'nle')
def _nle(c) -> None:
  """NLE's published TorchBeast agent (its polybeast config); PopArt stays on.
  Pair it with net=nle_baseline for NLE's network."""
  c.learning_rate = 2e-4
  c.optimizer.rmsprop_eps = 1e-6
  c.entropy_cost = 1e-4
  c.discount = 0.999
  c.unroll_length = 80


def _tasks(chars, env_id):
  """(task tuple, envs per task) for the `chars` variant."""
  if nethack.RANDOM in chars:
    if len(chars) != 1:
      raise ValueError(f"chars={nethack.RANDOM} plays one task per role and cannot be mixed "
                       f"with fixed characters; got chars={'+'.join(chars)}")
    return tuple(common.task(role, env_id, character=nethack.RANDOM)
                 for role in nethack.ROLES), ENVS_PER_ROLE
  if not chars:
    raise ValueError('chars is empty; give characters like val-dwa-law-fem+wiz-elf-cha-mal, or @')
  names = [str(nethack.parse_character(ch)) for ch in chars]
  twice = sorted({n for n in names if names.count(n) > 1})
  if twice:
    raise ValueError(f'character(s) {", ".join(twice)} given twice in chars')
  return tuple(common.task(n, env_id, character=n) for n in names), ENVS_PER_CHAR


def get_config(arg=None):
  """The main job's config, named 'nethack_popart'.

  The batch is one actor block: ENVS_PER_CHAR envs per character, or
  ENVS_PER_ROLE per role with chars=@.

  Args:
    arg: the variants (common.parse_variant), None for the defaults:
      task: a key of NLE_TASKS ('Score').
      chars: 'role-race-alignment-gender' characters joined by '+', or '@'
        for one task per role dealt random characters (DEFAULT_CHARS).
      net: a key of NETWORK_LSTM_SIZES ('nle_fast'; networks/nethack.py).
      recipe: a key of RECIPES ('fast').
      inputs: network.extra_inputs joined by '+', read by nle_fast and
        nle_baseline; empty for none (DEFAULT_INPUTS).
      popart: on; smoke: common.apply_smoke, off.

  Raises:
    ValueError: for a bad variant, task, net, recipe or character, '@' mixed
      with fixed characters, or inputs for a net that reads none.
  """
  variant = common.parse_variant(arg, {'task': 'Score', 'chars': DEFAULT_CHARS,
                                       'net': 'nle_fast', 'recipe': 'fast', 'smoke': False,
                                       'inputs': DEFAULT_INPUTS, 'popart': True})
  if variant['task'] not in NLE_TASKS:
    raise ValueError(f'unknown NLE task {variant["task"]!r}; choose one of {", ".join(NLE_TASKS)}')
  if variant['net'] not in NETWORK_LSTM_SIZES:
    raise ValueError(f'unknown net {variant["net"]!r}; choose one of {", ".join(NETWORK_LSTM_SIZES)}')
  env_id = NLE_TASKS[variant['task']]
  tasks, envs_per_task = _tasks(variant['chars'], env_id)
  c = common.base_config()
  c.config_name = 'nethack_popart'
  c.total_env_steps = 1_000_000_000
  c.reward_mode = 'none'        # PopArt handles the scale of in-game score deltas
  c.popart.enabled = variant['popart']
  c.network.name = variant['net']
  c.network.lstm_size = NETWORK_LSTM_SIZES[variant['net']]
  if variant['inputs'] and torsos.get(variant['net']).extra_inputs:
    c.network.extra_inputs = tuple(variant['inputs'])
  elif variant['inputs'] and variant['inputs'] != DEFAULT_INPUTS:
    raise ValueError(f"net={variant['net']} reads no extra inputs; inputs= needs net= one of "
                     f"{', '.join(torsos.names('extra_inputs'))}")
  c.tasks = tasks
  # Actor threads and NLE workers: sized to the machine (configs/actor_sizing.py).
  c.actors.envs_per_actor = envs_per_task * len(tasks)
  c.batch_size = c.actors.envs_per_actor
  c.log.every_seconds = 10.0
  common.apply_recipe(c, variant['recipe'], RECIPES)
  if variant['smoke']:
    common.apply_smoke(c)
  return c
