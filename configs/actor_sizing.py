"""How many actor threads a run gets (the most any of its env families asks for the cores,
EnvFamily.actor_threads, fewer where `lag_bound` would pass MAX_POLICY_LAG), and what each family
takes inside them (EnvFamily.size). A count at 0 is chosen, any other kept (docs/speed.md)."""

import dataclasses
import math
import os
from typing import Dict, Mapping, Sequence, Tuple

from envs.family import EnvFamily, Settings
from infra.settings import at_least, boolean, positive, setting

MAX_POLICY_LAG = 8   # learner updates; the Atari runs measure 1-2


@dataclasses.dataclass(frozen=True)
class ActorsConfig:
  """The actors' settings (the config's `actors` group); agents/actor.py
  runs them, and the 0s are sized here."""
  num_actors: int = setting(0, 'actor threads; 0 = sized to the machine (configs/actor_sizing.py)',
                            at_least(0))
  envs_per_actor: int = setting(16, 'envs per actor thread, split evenly over the tasks',
                                positive)
  cores: int = setting(0, 'the cores the 0s here and in the env families\' groups are sized '
                       'for; 0 = those this process may use', at_least(0))
  queue_size: int = setting(4, 'unroll blocks the actors may have waiting for the learner',
                            positive)
  wait_for_learner: bool = setting(
      False, 'after queueing, wait for queue room before acting on: params at most ~1 update '
      'old (PPO)', boolean)


@dataclasses.dataclass(frozen=True)
class ActorSizing:
  """The actor counts a run uses, and which of them the rule chose."""
  num_actors: int          # actor threads in this process
  cores: int               # the cores the rule sized for
  chosen: Tuple[str, ...]  # dotted settings the rule chose (the others came from the config)
  lag_bound: int           # lag_bound(num_actors, queue_size, blocks_per_batch)
  # env family name -> its counts per actor (EnvFamily.size), e.g. {'threads': 2, 'pools': 6}
  resources: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)
  clauses: Tuple[str, ...] = ()   # each family's EnvFamily.describe

  def describe(self, envs_per_actor: int, num_tasks: int) -> str:
    """One start-up line: the actor counts, the policy lag bound, and which
    counts the rule chose for how many cores."""
    lag = self.lag_bound
    per_task = envs_per_actor // max(num_tasks, 1)
    parts = [f'{self.num_actors} actor thread{"s" * (self.num_actors != 1)} x '
             f'{envs_per_actor} envs' + (f' ({per_task} per task)' if num_tasks > 1 else '')]
    parts += [c for c in self.clauses if c]
    parts.append(f'policy lag at most about {lag} update{"s" * (lag != 1)}')
    origin = (f'auto for {self.cores} cores: {", ".join(self.chosen)}' if self.chosen
              else 'all set by the config')
    return f'actors: {"; ".join(parts)} [{origin}]'


def available_cores() -> int:
  """The CPUs in the process's affinity mask (else os.cpu_count()), at least 1."""
  try:
    return max(1, len(os.sched_getaffinity(0)))
  except (AttributeError, OSError):
    return max(1, os.cpu_count() or 1)


def size(cores: int, envs_per_actor: int, families: Sequence[Tuple[EnvFamily, int]],
         settings: Settings, num_actors: int = 0, queue_size: int = 1,
         blocks_per_batch: int = 1) -> ActorSizing:
  """The actor sizing for `cores` by the rule of the module docstring.

  Args:
    envs_per_actor: envs per actor thread (all tasks together).
    families: (env family, its number of the run's tasks), each family once.
    num_actors: kept unless 0 (then chosen, and lowered until `lag_bound` is
      at most MAX_POLICY_LAG, not below 1).
    blocks_per_batch: actor blocks per learner batch (of this process).

  Raises:
    ValueError: when cores or envs_per_actor is below 1.
  """
  if cores < 1 or envs_per_actor < 1:
    raise ValueError(f'cores ({cores}) and envs_per_actor ({envs_per_actor}) must be >= 1')
  chosen = []
  if not num_actors:
    chosen.append('actors.num_actors')
    num_actors = max([f.actor_threads(cores) for f, _ in families] or [1])
    while num_actors > 1 and lag_bound(num_actors, queue_size, blocks_per_batch) > MAX_POLICY_LAG:
      num_actors -= 1
  resources: Dict[str, Dict[str, int]] = {}
  clauses = []
  for family, tasks in families:
    counts, picked = family.size(cores, num_actors, envs_per_actor, tasks, settings)
    chosen += picked
    if counts:
      resources[family.name] = dict(counts)
    clauses.append(family.describe(counts, num_actors, tasks) if counts else '')
  return ActorSizing(num_actors=num_actors, cores=cores, chosen=tuple(chosen),
                     lag_bound=lag_bound(num_actors, queue_size, blocks_per_batch),
                     resources=resources, clauses=tuple(clauses))


def resolve(actors: ActorsConfig, families: Sequence[Tuple[EnvFamily, int]], settings: Settings,
            blocks_per_batch: int) -> ActorSizing:
  """`size` with the `actors` group's settings (cores 0: available_cores)."""
  return size(actors.cores or available_cores(), actors.envs_per_actor, families, settings,
              num_actors=actors.num_actors, queue_size=actors.queue_size,
              blocks_per_batch=blocks_per_batch)


def lag_bound(num_actors: int, queue_size: int, blocks_per_batch: int) -> int:
  """The most learner updates between the params a block was acted with and
  the update that takes it: a block started on a full queue waits behind
  the queue and the other actors' blocks, plus the update in progress."""
  return math.ceil((queue_size + num_actors - 1) / blocks_per_batch) + 1
