"""Defaults shared by every experiment, and variant-argument parsing.

Defaults follow IMPALA's Atari table (Espeholt et al. 2018, Table G.1).
Experiment files start from `base_config()` and override what differs.
"""

import dataclasses
from typing import Tuple

import ml_collections

from configs.actor_sizing import ActorsConfig
from configs.log_settings import LogConfig, WandbConfig
from configs.pbt import PBTConfig
from infra import settings
from infra.multihost import DistributedConfig
from infra.settings import (at_least, boolean, finite_numbers, integer, one_of, positive, setting,
                            text, within)
from networks import torsos
from networks.network_config import NetworkConfig
from rl import algorithms
from rl.optimizers import OptimizerConfig
from rl.popart import PopArtConfig
from rl.rewards import REWARD_MODES
from rl.value_classification import ValueConfig

LOSS_REDUCTIONS = ('sum', 'mean')


def task(name: str, env_id: str, **env_kwargs) -> dict:
  """One task of a config's `tasks`; task ids follow the tasks' order there.

  Args:
    name: the task's name, unique in the run (used in metric keys).
    env_id: its env id, one a registered env family knows (EnvPool, NLE,
      Catch; envs/registry.py).
    **env_kwargs: the kwargs its env is made with, on top of any the env
      family adds (e.g. IMPALA's Atari protocol).

  Returns:
    {'name': name, 'env_id': env_id, 'env_kwargs': a dict of env_kwargs}.
  """
  return {'name': name, 'env_id': env_id, 'env_kwargs': dict(env_kwargs)}


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """The config's top-level fields: the run (name, folder, seed, length,
  checkpoints), the learner's batch, and what every loss shares. Defaults
  follow IMPALA's Atari table (Espeholt et al. 2018, Table G.1)."""
  config_name: str = setting('', 'experiment name: default workdir prefix and wandb tag', text)
  workdir: str = setting('', "run folder; '' = runs/<config_name>-<timestamp>", text)
  seed: int = setting(0, "seeds params, actors' sampling and envs", integer(0))
  total_env_steps: int = setting(50_000_000, 'agent steps summed over all envs (Atari: 4 frames '
                                 'each)', positive)
  checkpoint_every_steps: int = setting(5_000_000, 'env steps between checkpoints; 0 = only at '
                                        'the end', at_least(0))
  pause_at_env_steps: int = setting(
      0, '0 = train to total_env_steps; else stop at this env step with a checkpoint (the '
      'learning rate still anneals over total_env_steps); the same command with a larger '
      'value, or 0, goes on', at_least(0))
  keep_intermediate: bool = setting(False, 'keep every checkpoint (for analyses); False = only '
                                    'the last 2', boolean)
  batch_size: int = setting(32, 'unrolls per learner step (global, split over learner devices)',
                            positive)
  unroll_length: int = setting(20, 'T: steps per unroll (each unroll holds T + 1 observations)',
                               positive)
  learning_rate: float = setting(6e-4, 'annealed linearly to 0 (or to optimizer.anneal_to x it) '
                                 'over total_env_steps', positive)
  discount: float = setting(0.99, 'gamma; 0 at termination, bootstrapped at truncation',
                            within(0, 1))
  baseline_cost: float = setting(0.5, 'weight of the value loss 0.5 * sum (target - value)^2',
                                 at_least(0))
  entropy_cost: float = setting(0.01, 'weight of the entropy bonus', at_least(0))
  loss_reduction: str = setting(
      'sum', "'sum' over the batch's steps (IMPALA's code) or 'mean' (A2C's code)",
      one_of(LOSS_REDUCTIONS))
  reward_mode: str = setting(
      'clip', "'clip' to [-1, 1], 'none', or 'h': values learnt in h(x) space",
      one_of(REWARD_MODES))
  reward_scales: Tuple[float, ...] = setting(
      (), 'per-task reward multipliers (applied in the env); () = all 1', finite_numbers)
  num_learner_devices: int = setting(0, 'learner devices (data parallel); 0 = all local devices',
                                     at_least(0))
  actor_device_id: int = setting(0, "index of the local device that runs the actors' policy",
                                 at_least(0))
  tasks: Tuple[dict, ...] = setting(
      (), 'tuple of task(...) dicts; their order gives the task ids', lambda v: None)

  def problem(self):
    """A pause past the end of the run."""
    if self.pause_at_env_steps > self.total_env_steps:
      return ('pause_at_env_steps', f'{self.pause_at_env_steps:,} is past total_env_steps '
              f'({self.total_env_steps:,}); use at most that, or 0')
    return None


def groups() -> Tuple[Tuple[str, type], ...]:
  """Every config group base_config holds, with its settings class.

  Returns:
    (group name, settings class) pairs, in order: 'loss' (the learner's
    choice), each registered learner's own group (rl/algorithms.py), then
    optimizer, popart, value, network, actors, log, wandb, pbt and distributed.
  """
  learners = tuple((learner.config_group, learner.settings_type)
                   for learner in map(algorithms.get, algorithms.names()))
  return (('loss', algorithms.LossChoice), *learners, ('optimizer', OptimizerConfig),
          ('popart', PopArtConfig), ('value', ValueConfig), ('network', NetworkConfig), ('actors', ActorsConfig),
          ('log', LogConfig), ('wandb', WandbConfig), ('pbt', PBTConfig),
          ('distributed', DistributedConfig))


def base_config() -> ml_collections.ConfigDict:
  """Every field's default: what experiment files start from and override.

  Returns:
    A new ml_collections.ConfigDict: RunConfig's fields at the top, then one
    group per entry of `groups()`, each field at its default. It has no
    `atari` group (the Atari configs add it).
  """
  c = settings.config_dict(RunConfig)
  for name, cls in groups():
    c[name] = settings.config_dict(cls)
  return c


RECIPES = {}  # name -> recipe(config): the optimisation recipes of the Atari and control configs


def recipe(table: dict, name: str):
  """A decorator that registers a function as recipe `name` of `table`.

  A recipe sets a config's optimisation fields in place; every config family
  keeps its recipes in a table of its own and applies them with
  `apply_recipe`. A name registered again replaces the earlier recipe.

  Args:
    table: the family's recipe table (name -> recipe), e.g. RECIPES.
    name: the recipe's name, as the `recipe` variant gives it.

  Returns:
    The decorator; it returns the function unchanged.
  """
  def register(fn):
    table[name] = fn
    return fn
  return register


def apply_recipe(c: ml_collections.ConfigDict, name: str, recipes: dict = RECIPES) -> None:
  """Applies recipe `name` of `recipes` to a config, in place.

  Call it after the actors' env counts and the network are set: recipes
  size the batch from the first and read the second.

  Args:
    c: the config (unlocked).
    name: the recipe's name.
    recipes: the recipe table; RECIPES by default (the Atari and control
      configs').

  Raises:
    ValueError: for a name not in `recipes`, naming the choices.
  """
  if name not in recipes:
    raise ValueError(f'unknown recipe {name!r}; choose one of {", ".join(recipes)}')
  recipes[name](c)


@recipe(RECIPES, 'impala')
def _impala(c) -> None:
  """IMPALA's Atari table (base_config's values): unroll 20, batch 32,
  RMSProp lr 6e-4 with epsilon 0.01 inside the square root, clip 40 on the
  summed loss. Paper-faithful, but it moves the policy slowly: each update
  uses 640 steps, and with the loss summed over them the clip at 40 binds
  on almost every update (docs/pong.md, point 3)."""


def minibatch_count(batch: int, unrolls: float, devices=(1,)) -> int:
  """The number of minibatches that cuts `batch` unrolls nearest to
  `unrolls` each (the fewer on a tie), and that also splits each learner
  device's shard for every count in `devices` that divides the batch.

  Args:
    batch: unrolls per learner step (global).
    unrolls: the wanted unrolls per minibatch.
    devices: learner-device counts whose shards it must split too.

  Returns:
    The count, a divisor of every such shard (1 at worst).
  """
  shards = [batch // d for d in devices if batch % d == 0]
  return min((m for m in range(1, batch + 1) if all(s % m == 0 for s in shards)),
             key=lambda m: (abs(batch / m - unrolls), m))


@recipe(RECIPES, 'vtrace')
def _vtrace(c) -> None:
  """IMPALA's V-trace learner made to learn Pong in 1M agent steps on a
  CPU (docs/pong.md): each batch (about 32 unrolls of 20 steps) is cut into
  minibatches of about 4 shuffled unrolls, one Adam step each (lr 2.5e-4,
  epsilon 1e-5), V-trace taken with each step's params; the policy
  gradient's advantages normalised per minibatch; frames centred on each
  task's running mean frame; orthogonal initialisation, the loss averaged,
  clip 0.5, entropy 0.01, and a queue of one block (policy lag about 1.5
  updates). One pass over the data: about 12 optimiser steps per 1,000
  agent steps at the learner cost of IMPALA's one."""
  c.loss.name = 'impala'
  b = c.batch_size
  c.vtrace.epochs = 1
  c.vtrace.minibatches = minibatch_count(b, 4)   # about 4 unrolls each
  c.vtrace.normalize_advantages = True
  c.network.centre_frames = c.network.name in torsos.CENTRING_NETWORKS
  c.network.init = 'orthogonal'
  c.optimizer.name = 'adam'
  c.learning_rate = 2.5e-4
  c.optimizer.adam_eps = 1e-5
  c.optimizer.max_grad_norm = 0.5
  c.loss_reduction = 'mean'
  c.entropy_cost = 0.01
  c.baseline_cost = 0.5
  c.actors.queue_size = 1


@recipe(RECIPES, 'impala_adam')
def _impala_adam(c) -> None:
  """IMPALA's V-trace learner, batching left as the config has it (one game:
  32 unrolls of 20), with moolib's published Atari optimisation
  (examples/vtrace): Adam lr 6e-4 with epsilon 1e-8, the loss averaged over
  the batch, entropy cost 6e-4, clip 40."""
  c.optimizer.name = 'adam'
  c.learning_rate = 6e-4
  c.optimizer.adam_eps = 1e-8
  c.loss_reduction = 'mean'
  c.entropy_cost = 6e-4


@recipe(RECIPES, 'a2c')
def _a2c(c) -> None:
  """The optimisation of A2C (Mnih et al. 2016) as OpenAI baselines'
  TensorFlow code runs it on Atari, on the same V-trace learner: updates on
  5-step unrolls of about 16 envs (80 steps), the loss averaged over them,
  clip 0.5, and TensorFlow's RMSProp: lr 7e-4, decay 0.99, epsilon 1e-5
  inside the square root, the second moment starting at 1. The last two keep
  the step of a parameter with a tiny gradient small; without them RMSProp
  moves every first-layer weight by about lr in the same direction and most
  first-layer ReLUs die (docs/pong.md)."""
  envs = c.actors.envs_per_actor
  c.unroll_length = 5
  c.batch_size = envs * max(1, round(16 / envs))  # about 16 envs, in whole actor blocks
  c.learning_rate = 7e-4
  c.loss_reduction = 'mean'
  c.optimizer.rmsprop_eps = 1e-5
  c.optimizer.eps_in_sqrt = True
  c.optimizer.rmsprop_initial_scale = 1.0
  c.optimizer.max_grad_norm = 0.5


@recipe(RECIPES, 'ppo')
def _ppo(c) -> None:
  """cleanrl's Atari PPO (ppo_atari_envpool.py) on the same actors: batches
  of about 1,024 steps (about 16 envs x 64 steps, in whole actor blocks; the
  unroll a multiple of 4), 4 epochs x 4 minibatches of shuffled single steps
  (whole unrolls for an LSTM), clip 0.1, GAE(0.95) advantages normalised per
  minibatch, a clipped value loss, entropy 0.01, the loss averaged, clip
  0.5, Adam lr 2.5e-4 with epsilon 1e-5, orthogonal initialisation. A queue
  of one block, and actors that wait for the learner to take their block,
  keep the behaviour policy 1-2 updates old: PPO's ratio is taken against
  it, and an older one is clipped more."""
  envs = c.actors.envs_per_actor
  # Recurrent networks keep whole unrolls (their state runs along them), so
  # their batch must split into the 4 minibatches: the number of unrolls
  # nearest 16, in whole actor blocks, that 4 divides. Feed-forward ones
  # take single steps: the unroll, a multiple of 4, splits any batch.
  recurrent = bool(c.network.lstm_size) or c.network.name in torsos.RECURRENT_NETWORKS
  blocks = [k for k in range(1, 17) if not recurrent or envs * k % 4 == 0]
  c.batch_size = envs * min(blocks, key=lambda k: (abs(envs * k - 16), k))
  c.unroll_length = max(4, 1024 // c.batch_size // 4 * 4)
  c.ppo.split = 'unrolls' if recurrent else 'steps'
  c.loss.name = 'ppo'
  c.learning_rate = 2.5e-4
  c.entropy_cost = 0.01
  c.baseline_cost = 0.5
  c.loss_reduction = 'mean'
  c.optimizer.name = 'adam'
  c.optimizer.adam_eps = 1e-5
  c.optimizer.max_grad_norm = 0.5
  c.network.init = 'orthogonal'
  c.actors.queue_size = 1
  c.actors.wait_for_learner = True
  # Two actor threads unless the config chose: not sized to the machine, so
  # that the behaviour policy stays 1-2 updates old on any machine.
  c.actors.num_actors = c.actors.num_actors or 2


# The words a boolean variant accepts (any case).
TRUE_WORDS, FALSE_WORDS = ('1', 'true', 'yes', 'on'), ('0', 'false', 'no', 'off')


def parse_variant(arg, defaults: dict) -> dict:
  """Parses a config file's variant argument, 'key=value,flag,list=a+b'.

  Items are separated by commas (empty items are skipped). A bare key sets a
  boolean to True; key=value sets a boolean from TRUE_WORDS or FALSE_WORDS
  (any case); other values are converted to the default's type: a tuple
  from '+'-joined parts (empty parts dropped), an int, a float, or else the
  text itself. Keys not given keep their defaults.

  Args:
    arg: the variant text after the config file's ':' (None or '' for
      none).
    defaults: variant name -> default value; the defaults' types give the
      values' types.

  Returns:
    A new dict: every key of `defaults` -> its value.

  Raises:
    ValueError: for an unknown key (naming the allowed ones), a bare key
      whose default is not a boolean, a boolean's value not in TRUE_WORDS
      or FALSE_WORDS, or a value that is not a number where the default
      is one.
  """
  values = dict(defaults)
  if not arg:
    return values
  for item in str(arg).split(','):
    item = item.strip()
    if not item:
      continue
    key, sep, raw = item.partition('=')
    if key not in defaults:
      raise ValueError(f'unknown config variant {key!r}; allowed: {", ".join(sorted(defaults))}')
    default = defaults[key]
    if not sep:
      if not isinstance(default, bool):
        raise ValueError(f'config variant {key!r} needs a value ({key}=...)')
      values[key] = True
    elif isinstance(default, bool):
      if raw.lower() not in TRUE_WORDS + FALSE_WORDS:
        raise ValueError(f'config variant {key!r} is a boolean: {key}={{{",".join(TRUE_WORDS)}}} '
                         f'or {{{",".join(FALSE_WORDS)}}} (or a bare {key}), not {raw!r}')
      values[key] = raw.lower() in TRUE_WORDS
    elif isinstance(default, tuple):
      values[key] = tuple(v for v in raw.split('+') if v)
    elif isinstance(default, int):
      values[key] = int(raw)
    elif isinstance(default, float):
      values[key] = float(raw)
    else:
      values[key] = raw
  return values


def apply_smoke(c: ml_collections.ConfigDict) -> None:
  """Shrinks a config, in place, to a run of seconds: two learner steps on tiny batches.

  Call it after the tasks are set: every task gets two envs. One actor
  thread of those envs with a queue of 2, a batch of one actor block,
  unrolls of 4 steps, one learner device, one NLE worker, one minibatch for
  PPO and V-trace, logs at every learner step, and wandb disabled.

  Args:
    c: the config (unlocked).
  """
  envs = 2 * max(1, len(c.tasks))
  c.batch_size = envs
  c.unroll_length = 4
  c.total_env_steps = 2 * c.unroll_length * c.batch_size
  c.num_learner_devices = 1
  c.actors.num_actors = 1
  c.actors.envs_per_actor = envs
  c.actors.nle_workers = 1
  c.actors.queue_size = 2
  c.log.every_seconds = 0.0
  c.wandb.mode = 'disabled'
  c.ppo.minibatches = 1         # a batch of a few unrolls may not split further
  c.vtrace.minibatches = 1
  c.vtrace.balance_tasks = False  # one minibatch: nothing to balance
