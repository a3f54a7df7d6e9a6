"""The table of learners: the config's `loss.name` -> its rl/actor_critic.Learner
(rl/impala.py: V-trace actor-critic; rl/ppo.py: PPO). Everything that depends
on which learner a run uses asks here.

A new loss is one module in rl/ that defines a Learner, plus one line in
BUILT_IN (or `register(learner)` from anywhere before the run starts; its
settings group must then be in the run's config).
"""

from typing import Dict, Tuple

from rl import impala
from rl import ppo
from rl.actor_critic import Learner, LossConfig

BUILT_IN: Tuple[Learner, ...] = (impala.LEARNER, ppo.LEARNER)
_TABLE: Dict[str, Learner] = {learner.name: learner for learner in BUILT_IN}


def register(learner: Learner) -> None:
  """Adds `learner` to the table; ValueError if its name is taken."""
  if learner.name in _TABLE:
    raise ValueError(f'a learner named {learner.name!r} is registered already')
  _TABLE[learner.name] = learner


def unregister(name: str) -> None:
  """Removes a learner `register` added (the built-in ones stay)."""
  if any(learner.name == name for learner in BUILT_IN):
    raise ValueError(f'{name!r} is built in')
  _TABLE.pop(name, None)


def names() -> Tuple[str, ...]:
  """The learners a config may name, built-in first."""
  return tuple(_TABLE)


def get(name: str) -> Learner:
  """The learner `name`; ValueError naming the choices otherwise."""
  if name not in _TABLE:
    raise ValueError(f'unknown loss {name!r}; choose one of {", ".join(names())}')
  return _TABLE[name]


def settings_group(config):
  """The run config's group of its learner's own settings (`vtrace`, `ppo`, ...)."""
  return config[get(config.loss.name).config_group]


def settings(config):
  """The frozen settings of the run config's learner."""
  return get(config.loss.name).settings_from(settings_group(config))


def optimizer_steps_per_update(config) -> int:
  """Optimiser steps per learner update (e.g. epochs x minibatches)."""
  return get(config.loss.name).optimizer_steps(settings(config))


def loss_config(config) -> LossConfig:
  """The LossConfig of a run config (ml_collections)."""
  return LossConfig(
      discount=config.discount, baseline_cost=config.baseline_cost,
      entropy_cost=config.entropy_cost, reward_mode=config.reward_mode,
      popart_enabled=config.popart.enabled, popart_beta=config.popart.beta,
      reduction=config.loss_reduction, name=config.loss.name, settings=settings(config),
      num_tasks=len(config.tasks),
      # Runs written before clip_by existed read 'global'.
      clip_per_term=config.optimizer.get('clip_by', 'global') == 'term')
