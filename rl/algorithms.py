"""The table of learners: the config's `loss.name` -> the module that holds
that algorithm (rl/impala.py: V-trace actor-critic; rl/ppo.py: PPO).

Each module defines NAME, CONFIG_GROUP (the run config's group of its own
settings), settings_from(group), and make_update(apply_fn, loss_cfg,
optimizer, value_head, axis_name, seed, max_grad_norm) -> the per-device
update. Everything that depends on which learner a run uses asks here.
"""

from types import ModuleType

from rl import impala
from rl import ppo
from rl.actor_critic import LossConfig

ALGORITHMS = {impala.NAME: impala, ppo.NAME: ppo}
NAMES = tuple(ALGORITHMS)


def get(name: str) -> ModuleType:
  """The module of learner `name`; ValueError naming the choices otherwise."""
  if name not in ALGORITHMS:
    raise ValueError(f'unknown loss {name!r}; choose one of {", ".join(NAMES)}')
  return ALGORITHMS[name]


def settings_group(config):
  """The run config's group of its learner's own settings (`vtrace` or `ppo`)."""
  return config[get(config.loss.name).CONFIG_GROUP]


def optimizer_steps_per_update(config) -> int:
  """Optimiser steps per learner update: epochs x minibatches of the learner's group."""
  group = settings_group(config)
  return group.epochs * group.minibatches


def loss_config(config) -> LossConfig:
  """The LossConfig of a run config (ml_collections)."""
  return LossConfig(
      discount=config.discount, baseline_cost=config.baseline_cost,
      entropy_cost=config.entropy_cost, reward_mode=config.reward_mode,
      popart_enabled=config.popart.enabled, popart_beta=config.popart.beta,
      reduction=config.loss_reduction, name=config.loss.name,
      ppo=ppo.settings_from(config.ppo), vtrace=impala.settings_from(config.vtrace),
      num_tasks=len(config.tasks),
      # Runs written before clip_by existed read 'global'.
      clip_per_term=config.optimizer.get('clip_by', 'global') == 'term')
