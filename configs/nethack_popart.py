"""The main job: one PopArt IMPALA agent across NetHack characters on NLE.

  python launch/train.py --config=configs/nethack_popart.py
  python launch/train.py --config=configs/nethack_popart.py:task=Staircase,chars=val-dwa-law-fem+wiz-elf-cha-mal
  python launch/train.py --config=configs/nethack_popart.py:chars=@
  python launch/train.py --config=configs/nethack_popart.py:net=nle_simple
  python launch/train.py --config=configs/nethack_popart.py:smoke
  python launch/train.py --config=configs/nethack_popart.py:recipe=nle,net=nle_baseline

Each character is a task with its own PopArt statistics and value output;
rewards (in-game score deltas) are not clipped. Characters are
'role-race-alignment-gender' in NetHack's codes (envs/nethack.py), checked
against the game's rules here: NLE would silently play another character.

chars=@ plays random characters, as NetHackChallenge does: 13 tasks, one per
role, named by the role's code in envs.nethack.ROLES order ('arc', 'bar', ...,
'wiz'; task ids 0..12). Every env is dealt a random character at each new game
and that episode counts for the task of the role dealt, so the envs per task
are nominal and the tasks' shares of the data follow NetHack's role draw.

inputs= what nle_baseline / nle_fast read beside glyphs and blstats
(network.extra_inputs, networks/nethack.py): by default message+under_hero,
the message line (a character CNN) and the glyph under the hero (the
previous map's glyph where the hero now stands: the hero's `@` hides a
staircase). inputs= (empty) reads glyphs and blstats only.

net= picks the network (networks/torsos.py, networks/nethack.py):
nle_fast (the default: NLE's bundled agent with a 2-layer CNN on the full
map, for a faster learner step; docs/speed.md), nle_baseline (NLE's bundled agent: map and
9x9 crop CNNs of 5 layers, FC 512 x2, LSTM 512), nle_simple (small and
feed-forward) or nle_attention (the course report's variant: a strided glyph
ResNet whose 3x10 grid a blstats query attends over, FC 512 x2, LSTM 512).

recipe= picks the optimisation (RECIPES below; docs/nethack.md): fast (the
default), impala or nle.

popart=false is the main job without PopArt, its ablation: the same agent,
network and recipe, rewards still unclipped, and one value output shared by
the characters, as plain multi-task IMPALA has (configs/atari_multitask.py);
the per-character value outputs are part of what PopArt adds.

  python launch/train.py --config=configs/nethack_popart.py:popart=false
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
  """The default: RMSProp lr 2e-4 with epsilon 1e-6, PopArt beta 3e-3,
  entropy 1e-3, discount 0.999 (a descent found many steps ahead still
  counts), unroll 20, batch 32, clip 40."""
  c.learning_rate = 2e-4
  c.optimizer.rmsprop_eps = 1e-6
  c.popart.beta = 3e-3
  c.entropy_cost = 1e-3
  c.discount = 0.999


@common.recipe(RECIPES, 'impala')
def _impala(c) -> None:
  """IMPALA's Atari table (configs/common.py base_config): lr 6e-4, epsilon
  0.01, PopArt beta 3e-4 (Hessel et al.). Epsilon 0.01 dominates RMSProp's
  denominator for every parameter, and the policy moves by a KL of about
  5e-5 per update."""


@common.recipe(RECIPES, 'nle')
def _nle(c) -> None:
  """NLE's published TorchBeast agent (its polybeast config): lr 2e-4,
  epsilon 1e-6, entropy 1e-4, discount 0.999, unroll 80, batch 32, clip 40.
  PopArt stays on (beta 3e-4) where NLE normalised or clipped rewards; pair
  it with net=nle_baseline for NLE's network."""
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
  """The main job: one PopArt IMPALA agent across NetHack characters on NLE.

  Each character is a task with its own PopArt statistics and value output
  (one shared value output with popart=false); rewards are not clipped. The
  batch is one actor block: ENVS_PER_CHAR envs per character, or
  ENVS_PER_ROLE per role with chars=@.

  Args:
    arg: the variant text after the file name's ':' (common.parse_variant),
      None for the defaults. Keys: task (a key of NLE_TASKS; 'Score'), chars
      (characters 'role-race-alignment-gender' joined by '+', or '@' for
      one task per role dealt random characters; DEFAULT_CHARS), net (a key
      of NETWORK_LSTM_SIZES; 'nle_fast'), recipe (RECIPES: 'fast', 'impala'
      or 'nle'; 'fast'), inputs (network.extra_inputs joined by '+', read by
      nle_fast and nle_baseline, empty for none; DEFAULT_INPUTS), popart
      (on) and smoke (common.apply_smoke; off).

  Returns:
    The config (ml_collections.ConfigDict), named 'nethack_popart'.

  Raises:
    ValueError: for an unknown variant key or a bad value, an unknown task,
      net or recipe, a character that is bad or given twice, '@' mixed with
      fixed characters, no characters, or inputs other than the default for
      a net that reads none.
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
  if variant['inputs'] and variant['net'] in torsos.EXTRA_INPUT_NETWORKS:
    c.network.extra_inputs = tuple(variant['inputs'])
  elif variant['inputs'] and variant['inputs'] != DEFAULT_INPUTS:
    raise ValueError(f"net={variant['net']} reads no extra inputs; inputs= needs net= one of "
                     f"{', '.join(torsos.EXTRA_INPUT_NETWORKS)}")
  c.tasks = tasks
  # Actor threads and NLE workers: sized to the machine (configs/actor_sizing.py;
  # 1 actor x 2 workers on 2 cores).
  c.actors.envs_per_actor = envs_per_task * len(tasks)
  c.batch_size = c.actors.envs_per_actor
  c.log.every_seconds = 10.0
  common.apply_recipe(c, variant['recipe'], RECIPES)
  if variant['smoke']:
    common.apply_smoke(c)
  return c
