"""How many actor threads, EnvPool threads and NLE workers a run gets.

The `actors` fields at 0 are chosen from the cores the process may use
and the envs it steps (docs/speed.md, "How actors are sized"); a field a
config sets is kept:
- EnvPool tasks: one actor thread per 4 cores, 2 to 8 (two or more
  overlap policy steps with env steps); threads per pool
  `max(2, max(cores, 4) // (actors * pools))`, at most a pool's envs.
- NLE tasks: one actor thread per 8 cores, 1 to 4; workers per actor
  `max(2, cores // actors)`, at most its envs.
- Synthetic envs (Catch): 1 actor thread.
- Fewer actor threads where `lag_bound` would pass MAX_POLICY_LAG.
"""

import dataclasses
import math
import os
from typing import Sequence, Tuple

from infra.settings import at_least, boolean, positive, setting

# The rule's constants (see the module docstring).
CORES_PER_ENVPOOL_ACTOR = 4
MIN_ENVPOOL_ACTORS = 2
MAX_ENVPOOL_ACTORS = 8
MIN_ENVPOOL_THREAD_BUDGET = 4
MIN_ENVPOOL_THREADS_PER_POOL = 2
CORES_PER_NLE_ACTOR = 8
MAX_NLE_ACTORS = 4
MIN_NLE_WORKERS = 2
MAX_POLICY_LAG = 8   # learner updates; the Atari runs measure 1-2


@dataclasses.dataclass(frozen=True)
class ActorsConfig:
  """The actors' settings (the config's `actors` group); agents/actor.py
  runs them, and the 0s are sized here."""
  num_actors: int = setting(0, 'actor threads; 0 = sized to the machine (configs/actor_sizing.py)',
                            at_least(0))
  envs_per_actor: int = setting(16, 'envs per actor thread, split evenly over the tasks',
                                positive)
  envpool_threads: int = setting(
      0, 'EnvPool threads per pool (a pool per task per actor); 0 = sized to the machine',
      at_least(0))
  nle_workers: int = setting(0, 'NLE worker processes per actor; 0 = sized to the machine',
                             at_least(0))
  cores: int = setting(0, 'the cores the 0s above are sized for; 0 = those this process may use',
                       at_least(0))
  queue_size: int = setting(4, 'unroll blocks the actors may have waiting for the learner',
                            positive)
  wait_for_learner: bool = setting(
      False, 'after queueing, wait for queue room before acting on: params at most ~1 update '
      'old (PPO)', boolean)
  nle_ttyrecs: bool = setting(False, 'write NLE ttyrecs into <workdir>/nle', boolean)


@dataclasses.dataclass(frozen=True)
class ActorSizing:
  """The actor counts a run uses, and which of them the rule chose."""
  num_actors: int          # actor threads in this process
  envpool_threads: int     # per EnvPool pool (one pool per EnvPool task per actor); 0 = none stepped
  nle_workers: int         # NLE worker processes per actor; 0 = none stepped
  cores: int               # the cores the rule sized for
  chosen: Tuple[str, ...]  # fields the rule chose (the others came from the config)
  envpool_pools: int       # EnvPool pools per actor (its EnvPool tasks)
  lag_bound: int           # lag_bound(num_actors, queue_size, blocks_per_batch)

  def describe(self, envs_per_actor: int, num_tasks: int) -> str:
    """One start-up line: the actor counts, the policy lag bound, and which
    counts the rule chose for how many cores."""
    envpool_pools, lag = self.envpool_pools, self.lag_bound
    per_task = envs_per_actor // max(num_tasks, 1)
    parts = [f'{self.num_actors} actor thread{"s" * (self.num_actors != 1)} x '
             f'{envs_per_actor} envs' + (f' ({per_task} per task)' if num_tasks > 1 else '')]
    if envpool_pools:
      total = self.envpool_threads * envpool_pools * self.num_actors
      parts.append(f'{self.envpool_threads} EnvPool thread{"s" * (self.envpool_threads != 1)} '
                   f'per pool ({envpool_pools} pool{"s" * (envpool_pools != 1)} per actor, '
                   f'{total} threads in all)')
    if self.nle_workers:
      parts.append(f'{self.nle_workers} NLE worker processes per actor')
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


def size(cores: int, envs_per_actor: int, envpool_pools: int, nle_tasks: bool,
         num_actors: int = 0, envpool_threads: int = 0, nle_workers: int = 0,
         queue_size: int = 1, blocks_per_batch: int = 1) -> ActorSizing:
  """The actor sizing for `cores` by the rule of the module docstring.

  Each of num_actors, envpool_threads and nle_workers given as 0 is chosen;
  any other value is kept. A chosen num_actors is lowered until `lag_bound`
  is at most MAX_POLICY_LAG (not below 1).

  Args:
    envs_per_actor: envs per actor thread (all tasks together).
    envpool_pools: EnvPool pools per actor (its EnvPool tasks); 0 = none.
    blocks_per_batch: actor blocks per learner batch (of this process).

  Raises:
    ValueError: when cores or envs_per_actor is below 1, or envpool_pools
      below 0.
  """
  if cores < 1 or envs_per_actor < 1 or envpool_pools < 0:
    raise ValueError(f'cores ({cores}) and envs_per_actor ({envs_per_actor}) must be >= 1, '
                     f'envpool_pools ({envpool_pools}) >= 0')
  chosen = []
  if not num_actors:
    chosen.append('num_actors')
    if envpool_pools:
      num_actors = min(MAX_ENVPOOL_ACTORS,
                       max(MIN_ENVPOOL_ACTORS, cores // CORES_PER_ENVPOOL_ACTOR))
    elif nle_tasks:
      num_actors = min(MAX_NLE_ACTORS, max(1, cores // CORES_PER_NLE_ACTOR))
    else:
      num_actors = 1
    while num_actors > 1 and lag_bound(num_actors, queue_size, blocks_per_batch) > MAX_POLICY_LAG:
      num_actors -= 1
  if envpool_pools and not envpool_threads:
    chosen.append('envpool_threads')
    budget = max(cores, MIN_ENVPOOL_THREAD_BUDGET)
    envs_per_pool = max(1, envs_per_actor // envpool_pools)
    envpool_threads = min(envs_per_pool, max(MIN_ENVPOOL_THREADS_PER_POOL,
                                             budget // (num_actors * envpool_pools)))
  if nle_tasks and not nle_workers:
    chosen.append('nle_workers')
    nle_workers = min(envs_per_actor, max(MIN_NLE_WORKERS, cores // num_actors))
  return ActorSizing(num_actors=num_actors,
                     envpool_threads=envpool_threads if envpool_pools else 0,
                     nle_workers=nle_workers if nle_tasks else 0,
                     cores=cores, chosen=tuple(chosen), envpool_pools=envpool_pools,
                     lag_bound=lag_bound(num_actors, queue_size, blocks_per_batch))


def resolve(config, families: Sequence[str], blocks_per_batch: int) -> ActorSizing:
  """`size` with the config's `actors` group.

  Args:
    families: each task's actor kind (registry.actor_kind), in task order.
    blocks_per_batch: actor blocks per learner batch (of this process).
  """
  a = config.actors
  cores = a.cores or available_cores()   # old run folders read 0 (analysis/run_loading)
  return size(cores, a.envs_per_actor, envpool_pools=sum(f == 'envpool' for f in families),
              nle_tasks='nle' in families, num_actors=a.num_actors,
              envpool_threads=a.envpool_threads, nle_workers=a.nle_workers,
              queue_size=a.queue_size, blocks_per_batch=blocks_per_batch)


def lag_bound(num_actors: int, queue_size: int, blocks_per_batch: int) -> int:
  """The most learner updates between the params a block was acted with and
  the update that takes it: a block started on a full queue waits behind
  the queue and the other actors' blocks, plus the update in progress."""
  return math.ceil((queue_size + num_actors - 1) / blocks_per_batch) + 1
