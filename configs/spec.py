"""The run spec: a run's config read once, at start-up, into frozen typed settings. Everything after
the command line (agents/, rundir/, analysis/, the logger, the benchmarks) receives it and never an
ml_collections config; rl/ and networks/ receive the pieces they need."""

import dataclasses
from typing import Any, Dict, Mapping

from configs.actor_sizing import ActorsConfig
from configs.common import RunConfig
from configs.log_settings import LogConfig, WandbConfig
from configs.plan import RunPlan
from envs import registry
from infra.multihost import DistributedConfig
from networks.network_config import NetworkConfig
from rl import algorithms
from rl.actor_critic import Learner, LossConfig
from rl.optimizers import OptimizerConfig
from rl.popart import PopArtConfig
from rl.value_classification import ValueConfig


@dataclasses.dataclass(frozen=True)
class RunSpec:
  """Everything a run is, typed and checked: one field per config group (`run`: the top-level
  fields; `loss`: what the loss reads, the learner's settings in it; `envs`: the env families'
  groups by name, e.g. 'atari'), the derived `plan`, and `source` (JSON types), for the run folder,
  the resume check and wandb."""
  run: RunConfig
  loss: LossConfig
  optimizer: OptimizerConfig
  popart: PopArtConfig
  value: ValueConfig
  network: NetworkConfig
  actors: ActorsConfig
  log: LogConfig
  wandb: WandbConfig
  distributed: DistributedConfig
  envs: Mapping[str, Any]
  plan: RunPlan
  source: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

  @property
  def learner(self) -> Learner:
    """The learner (rl/algorithms.py) that `loss.name` picks."""
    return algorithms.get(self.loss.name)

  @property
  def optimizer_steps_per_update(self) -> int:
    """Optimiser steps per learner update (e.g. epochs x minibatches)."""
    return self.learner.optimizer_steps(self.loss.settings)


def loss_config(run: RunConfig, popart: PopArtConfig, optimizer: OptimizerConfig,
                learner_settings: Any, learner_name: str,
                value: ValueConfig = ValueConfig()) -> LossConfig:
  """The learners' LossConfig of a run's settings (clip_by 'term': clips per term in the step)."""
  return LossConfig(
      discount=run.discount, baseline_cost=run.baseline_cost, entropy_cost=run.entropy_cost,
      reward_mode=run.reward_mode, popart_enabled=popart.enabled, popart_beta=popart.beta,
      reduction=run.loss_reduction, name=learner_name, settings=learner_settings,
      num_tasks=len(run.tasks), clip_per_term=optimizer.clip_by == 'term',
      popart_per_sample=popart.step_per == 'sample', value=value)


def make_spec(groups: Dict[str, Any], learner_settings: Any, plan: RunPlan,
              source: Mapping[str, Any]) -> RunSpec:
  """The RunSpec of a checked config: its groups (validation.read_groups) and its JSON `source`."""
  run, popart, optimizer = groups[''], groups['popart'], groups['optimizer']
  return RunSpec(
      run=run, loss=loss_config(run, popart, optimizer, learner_settings, groups['loss'].name,
                                groups['value']),
      optimizer=optimizer, popart=popart, value=groups['value'], network=groups['network'],
      actors=groups['actors'],
      log=groups['log'], wandb=groups['wandb'], distributed=groups['distributed'],
      envs={name: groups[name] for name in registry.settings_groups()}, plan=plan,
      source=source)


def with_workdir(spec: RunSpec, workdir: str) -> RunSpec:
  """A new spec with run.workdir set (and its source's), for a folder chosen after validation."""
  return dataclasses.replace(spec, run=dataclasses.replace(spec.run, workdir=workdir),
                             source={**spec.source, 'workdir': workdir})
