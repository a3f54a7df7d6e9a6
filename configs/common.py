"""Defaults shared by every experiment (IMPALA's Atari table, Espeholt et al.
2018, Table G.1), the optimisation recipes, and variant-argument parsing."""

import dataclasses
import datetime
import os
from typing import Tuple

import ml_collections

from configs.actor_sizing import ActorsConfig
from configs.log_settings import LogConfig, WandbConfig
from configs.pbt import PBTConfig
from envs import registry
from infra import settings
from infra.multihost import DistributedConfig
from infra.settings import (at_least, boolean, finite_numbers, frozen_setting, integer, one_of,
                            positive, setting, text, within)
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
    env_id: an env id a registered env family knows (envs/registry.py).
    **env_kwargs: its env's kwargs, on top of any the family adds.
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
  tasks: Tuple[dict, ...] = frozen_setting(
      (), 'tuple of task(...) dicts; their order gives the task ids', lambda v: None)

  def problem(self):
    """A pause past the end of the run."""
    if self.pause_at_env_steps > self.total_env_steps:
      return ('pause_at_env_steps', f'{self.pause_at_env_steps:,} is past total_env_steps '
              f'({self.total_env_steps:,}); use at most that, or 0')
    return None


def groups() -> Tuple[Tuple[str, type], ...]:
  """(group name, settings class) pairs base_config holds, in order: 'loss',
  each registered learner's group (rl/algorithms.py), the shared ones, then
  each registered env family's (envs/registry.settings_groups)."""
  learners = tuple((learner.config_group, learner.settings_type)
                   for learner in map(algorithms.get, algorithms.names()))
  return (('loss', algorithms.LossChoice), *learners, ('optimizer', OptimizerConfig),
          ('popart', PopArtConfig), ('value', ValueConfig), ('network', NetworkConfig),
          ('actors', ActorsConfig), ('log', LogConfig), ('wandb', WandbConfig),
          ('pbt', PBTConfig), ('distributed', DistributedConfig),
          *registry.settings_groups().items())


def default_workdir(config_name: str) -> str:
  """The run folder of an empty workdir: runs/<config_name or 'run'>-<YYYYmmdd-HHMMSS>."""
  stamp = datetime.datetime.now().strftime('%Y%m%d-%H%M%S')
  return os.path.join('runs', f'{config_name or "run"}-{stamp}')


def base_config() -> ml_collections.ConfigDict:
  """A new ConfigDict of every `groups` field at its default (what experiment files start from)."""
  c = settings.config_dict(RunConfig)
  for name, cls in groups():
    c[name] = settings.config_dict(cls)
  return c


RECIPES = {}  # name -> recipe(config): the optimisation recipes of the Atari and control configs


def recipe(table: dict, name: str):
  """A decorator registering a function as recipe `name` of `table` (a recipe sets a config's
  optimisation fields in place; a name registered again replaces the earlier one)."""
  def register(fn):
    table[name] = fn
    return fn
  return register


def apply_recipe(c: ml_collections.ConfigDict, name: str, recipes: dict = RECIPES) -> None:
  """Applies recipe `name` of `recipes` to config `c`, in place.

  Call it after the actors' env counts and the network are set: recipes
  size the batch from the first and read the second.

  Raises:
    ValueError: for a name not in `recipes`, naming the choices.
  """
  if name not in recipes:
    raise ValueError(f'unknown recipe {name!r}; choose one of {", ".join(recipes)}')
  recipes[name](c)


@recipe(RECIPES, 'impala')
def _impala(c) -> None:
  """IMPALA's Atari table: base_config's values."""


def minibatch_count(batch: int, unrolls: float, devices=(1,)) -> int:
  """The number of minibatches that cuts `batch` unrolls nearest to
  `unrolls` each (the fewer on a tie) and also splits each learner device's
  shard for every count in `devices` that divides the batch (1 at worst)."""
  shards = [batch // d for d in devices if batch % d == 0]
  return min((m for m in range(1, batch + 1) if all(s % m == 0 for s in shards)),
             key=lambda m: (abs(batch / m - unrolls), m))


@recipe(RECIPES, 'vtrace')
def _vtrace(c) -> None:
  """IMPALA's V-trace learner made to learn Pong in 1M agent steps (docs/pong.md)."""
  c.loss.name = 'impala'
  b = c.batch_size
  c.vtrace.epochs = 1
  c.vtrace.minibatches = minibatch_count(b, 4)   # about 4 unrolls each
  c.vtrace.normalize_advantages = True
  c.network.centre_frames = torsos.get(c.network.name).centres_frames
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
  """V-trace learner with moolib's Atari optimisation (examples/vtrace); clip 40 as IMPALA's."""
  c.optimizer.name = 'adam'
  c.learning_rate = 6e-4
  c.optimizer.adam_eps = 1e-8
  c.loss_reduction = 'mean'
  c.entropy_cost = 6e-4


@recipe(RECIPES, 'a2c')
def _a2c(c) -> None:
  """A2C's optimisation (Mnih et al. 2016) as OpenAI baselines runs it on Atari, on the V-trace
  learner. TensorFlow's RMSProp (epsilon inside the square root, second moment starting at 1) keeps
  tiny gradients' steps small; without it most first-layer ReLUs die (docs/pong.md)."""
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
  """cleanrl's Atari PPO (ppo_atari_envpool.py). A queue of one block and actors that wait for the
  learner keep the behaviour policy 1-2 updates old, which PPO's ratio is taken against."""
  envs = c.actors.envs_per_actor
  # Recurrent networks keep whole unrolls (their state runs along them), so their batch must split
  # into the 4 minibatches: the number of unrolls nearest 16, in whole actor blocks, that 4 divides.
  # Feed-forward ones take single steps: the unroll, a multiple of 4, splits any batch.
  recurrent = bool(c.network.lstm_size) or torsos.get(c.network.name).recurrent
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
  # Two actor threads unless set, whatever the machine: the behaviour policy stays 1-2 updates old.
  c.actors.num_actors = c.actors.num_actors or 2


# The words a boolean variant accepts (any case).
TRUE_WORDS, FALSE_WORDS = ('1', 'true', 'yes', 'on'), ('0', 'false', 'no', 'off')


def parse_variant(arg, defaults: dict) -> dict:
  """Parses a config file's variant argument, 'key=value,flag,list=a+b'.

  A bare key sets a boolean to True; key=value sets a boolean from TRUE_WORDS or FALSE_WORDS; other
  values take the default's type: a tuple from '+'-joined parts, an int, a float, or the text.

  Args:
    arg: the text after the config file's ':' (None or '' for none).
    defaults: variant name -> default value (its type is the value's).

  Returns:
    A new dict: every key of `defaults` -> its value.

  Raises:
    ValueError: an unknown key, a bare non-boolean key, or a value not of the default's type.
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
  """Shrinks config `c`, in place, to a run of seconds: two learner steps on
  tiny batches. Call it after the tasks are set (every task gets two envs)."""
  envs = 2 * max(1, len(c.tasks))
  c.batch_size = envs
  c.unroll_length = 4
  c.total_env_steps = 2 * c.unroll_length * c.batch_size
  c.num_learner_devices = 1
  c.actors.num_actors = 1
  c.actors.envs_per_actor = envs
  c.nle.workers = 1
  c.actors.queue_size = 2
  c.log.every_seconds = 0.0
  c.wandb.mode = 'disabled'
  c.ppo.minibatches = 1         # a batch of a few unrolls may not split further
  c.vtrace.minibatches = 1
  c.vtrace.balance_tasks = False  # one minibatch: nothing to balance
