"""The run plan: the sizes and assignments a valid config gives (devices,
actor sizing, each actor's env groups, batch blocks, step counts)."""

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import jax

from configs import actor_sizing
from envs import registry
from envs.family import EnvFamily, Settings
from infra import multihost


@dataclasses.dataclass(frozen=True)
class RunPlan:
  """Sizes and assignments derived from a valid config."""
  task_names: Tuple[str, ...]
  num_values: int                      # value outputs: tasks with PopArt, else 1
  learner_devices: Tuple[jax.Device, ...]  # of every process: the learner mesh
  actor_device: jax.Device             # local
  actor_env_groups: Tuple[Tuple[registry.EnvGroup, ...], ...]  # per local actor
  blocks_per_batch: int                # local actor unroll blocks per learner batch
  env_steps_per_update: int            # T * batch_size
  total_learner_steps: int
  observation_keys: Tuple[str, ...]
  frames_per_step: int                 # 4 for Atari (action repeat), else 1
  task_env_ids: Tuple[str, ...]        # each task's env id
  actors: actor_sizing.ActorSizing     # actor threads, each family's counts, lag bound

  @property
  def num_tasks(self) -> int:
    return len(self.task_names)

  @property
  def num_actors(self) -> int:
    """Actor threads in this process."""
    return self.actors.num_actors

  def normalised_score(self, task_id: int, episode_return: float) -> Optional[float]:
    """A task's return on its env family's shared scale (Atari's
    human-normalised score), or None where the family has none."""
    return registry.normalised_score(self.task_env_ids[task_id], episode_return)

  def describe_actors(self) -> str:
    """The start-up line saying how the actors are sized."""
    envs = sum(g.num_envs for g in self.actor_env_groups[0])
    return self.actors.describe(envs, self.num_tasks)


def make_plan(config, tasks: List[dict], env_kwargs: List[dict], scales: Sequence[float],
              roles: Dict[int, Tuple[int, ...]], observation_keys: Tuple[str, ...],
              frames_per_step: int, learner_devices_per_process: int,
              families: Sequence[Tuple[EnvFamily, int]], actors: actor_sizing.ActorsConfig,
              settings: Settings) -> RunPlan:
  """The run plan of a config that passed validation.

  Every actor gets one env group per task, each the task's share of actors.envs_per_actor; this
  process's share of a batch is batch_size / processes unrolls, in blocks of one actor's envs.

  Args:
    env_kwargs: each task's env kwargs (registry.task_env_kwargs).
    roles: task index -> the task id of each role its envs deal
      (EnvFamily.role_task_ids), for the tasks that deal roles.
    frames_per_step: the most frames an env step covers (4 for Atari).
    families: (env family, its number of tasks), each of the run's once.
  """
  devices = jax.local_devices()
  processes = jax.process_count()
  num_tasks = len(tasks)
  envs = actors.envs_per_actor
  local_batch = config.batch_size // processes
  per_task = envs // num_tasks
  blocks_per_batch = local_batch // envs
  sizing = actor_sizing.resolve(actors, families, settings, blocks_per_batch)
  groups = tuple(
      tuple(registry.EnvGroup(task_id=i, env_id=t['env_id'],
                              env_kwargs=env_kwargs[i],
                              role_task_ids=roles.get(i),
                              reward_scale=float(scales[i]), num_envs=per_task)
            for i, t in enumerate(tasks))
      for _ in range(sizing.num_actors))
  steps_per_update = config.unroll_length * config.batch_size
  return RunPlan(
      task_names=tuple(t['name'] for t in tasks),
      num_values=num_tasks if config.popart.enabled else 1,
      learner_devices=multihost.learner_devices(learner_devices_per_process),
      actor_device=devices[config.actor_device_id],
      actor_env_groups=groups,
      blocks_per_batch=blocks_per_batch,
      env_steps_per_update=steps_per_update,
      total_learner_steps=max(1, -(-config.total_env_steps // steps_per_update)),
      observation_keys=observation_keys,
      frames_per_step=frames_per_step,
      task_env_ids=tuple(t['env_id'] for t in tasks),
      actors=sizing)
