"""How many actor threads, EnvPool threads and NLE workers a run gets.

`actors.num_actors`, `actors.envpool_threads` and `actors.nle_workers` at 0
are chosen here from the cores the process may use (`actors.cores`, 0 = its
CPU affinity) and the envs it steps; a field a config sets is kept. The rule
(docs/speed.md, "How actors are sized"):

- EnvPool tasks: one actor thread per 4 cores, at least 2 and at most 8.
  Two or more threads overlap: while one runs its policy step, another's
  envs step. EnvPool threads per pool: max(cores, 4) threads shared over
  every pool of every actor (a pool per task per actor), but at least 2:
  `max(2, max(cores, 4) // (actors * pools))`, never more than a pool's
  envs. (Six games' pools of 2 envs with 1 thread each stepped at 0.62x
  the speed of 2 threads each on 2 cores: EnvPool's threads sleep when
  idle, so more of them than cores costs little.)
- NLE tasks: 1 actor thread below 8 cores, else one per 8 cores up to 4;
  worker processes `max(2, cores // actors)` per actor, never more than its
  envs (each worker steps a share of them).
- Synthetic envs (Catch) step in the actor thread itself: 1 actor thread.
- Fewer actor threads where more would let the policy lag (`lag_bound`)
  pass MAX_POLICY_LAG learner updates: a batch of one actor block with a
  queue of 4 (the A2C recipe) takes at most 4 threads.

On this project's 2-core machine the rule gives the settings its recipes
were tuned with (2 actors x 2 EnvPool threads per pool for the Atari
configs, 1 actor x 2 NLE workers for the main job), so their curves stand.

Pure: `size` takes the counts and returns the sizing; `resolve` reads a
config. The learner's step count per block of actors' data and the queue
bound the policy lag, which `lag_bound` states.
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
    """One start-up line: what the actors are and where each count came from.

    Args:
      envs_per_actor: envs per actor thread (all tasks together).
      num_tasks: the run's number of tasks.

    Returns:
      'actors: <n> actor threads x <m> envs; <k> EnvPool threads per pool
      (...); <w> NLE worker processes per actor; policy lag at most about <l>
      updates [<origin>]', the EnvPool and NLE parts only where the actors
      step such envs; the origin names the cores the rule sized for and the
      fields it chose, or says the config set them all.
    """
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
  """The cores this process may run on.

  Returns:
    The number of CPUs in the process's affinity mask where the OS gives
    one, else os.cpu_count(); at least 1.
  """
  try:
    return max(1, len(os.sched_getaffinity(0)))
  except (AttributeError, OSError):
    return max(1, os.cpu_count() or 1)


def size(cores: int, envs_per_actor: int, envpool_pools: int, nle_tasks: bool,
         num_actors: int = 0, envpool_threads: int = 0, nle_workers: int = 0,
         queue_size: int = 1, blocks_per_batch: int = 1) -> ActorSizing:
  """The actor sizing for `cores` by the rule of the module docstring.

  Each of num_actors, envpool_threads and nle_workers given as 0 is chosen by
  the rule; any other value is kept. A chosen num_actors is lowered until
  `lag_bound` is at most MAX_POLICY_LAG (but not below 1); a given one is
  kept whatever its bound. Pure: the same arguments give the same sizing.

  Args:
    cores: the cores to size for.
    envs_per_actor: envs per actor thread (all tasks together).
    envpool_pools: EnvPool pools per actor (its EnvPool tasks); 0 = none.
    nle_tasks: whether the actors step NLE envs.
    num_actors: actor threads; 0 = chosen by the rule.
    envpool_threads: EnvPool threads per pool; 0 = chosen by the rule.
    nle_workers: NLE worker processes per actor; 0 = chosen by the rule.
    queue_size: unroll blocks the actors may have waiting for the learner.
    blocks_per_batch: actor blocks per learner batch (of this process).

  Returns:
    The ActorSizing: envpool_threads 0 where there are no EnvPool pools,
    nle_workers 0 where there are no NLE tasks, `chosen` naming the fields
    the rule chose, and the sizing's `lag_bound`.

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
  """The actor sizing of a config (`size` with its `actors` group).

  Args:
    config: a run config; its `actors` group is read (cores 0 = the cores
      this process may use, `available_cores`).
    families: each task's actor kind (registry.actor_kind: 'envpool', 'nle'
      or 'synthetic'), in task order; each 'envpool' task is a pool per actor.
    blocks_per_batch: actor blocks per learner batch (of this process).

  Returns:
    The ActorSizing, as `size` gives it.

  Raises:
    ValueError: as `size`, for cores or envs_per_actor below 1.
  """
  a = config.actors
  cores = a.cores or available_cores()   # old run folders read 0 (analysis/run_loading)
  return size(cores, a.envs_per_actor, envpool_pools=sum(f == 'envpool' for f in families),
              nle_tasks='nle' in families, num_actors=a.num_actors,
              envpool_threads=a.envpool_threads, nle_workers=a.nle_workers,
              queue_size=a.queue_size, blocks_per_batch=blocks_per_batch)


def lag_bound(num_actors: int, queue_size: int, blocks_per_batch: int) -> int:
  """A bound on the policy lag: learner updates between acting and learning.

  With actors stepping at one speed, a block started when the queue was full
  waits behind the queue and the other actors' blocks in progress,
  `(queue_size + num_actors - 1) / blocks_per_batch` batches, plus the update
  in progress. Measured lags are in the run's metrics (policy_lag,
  policy_lag_max).

  Args:
    num_actors: actor threads.
    queue_size: unroll blocks the actors may have waiting for the learner.
    blocks_per_batch: actor blocks per learner batch (at least 1).

  Returns:
    The most learner updates between the params a block was acted with and
    the update that takes it: ceil((queue_size + num_actors - 1) /
    blocks_per_batch) + 1.
  """
  return math.ceil((queue_size + num_actors - 1) / blocks_per_batch) + 1
