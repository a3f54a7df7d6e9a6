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
  """Adds a learner to the table, under its name.

  Args:
    learner: the learner; its `config_group` must be in the run's config.

  Raises:
    ValueError: a learner of that name is registered already.
  """
  if learner.name in _TABLE:
    raise ValueError(f'a learner named {learner.name!r} is registered already')
  _TABLE[learner.name] = learner


def unregister(name: str) -> None:
  """Removes a learner that `register` added.

  Args:
    name: the learner's name; a name not in the table is ignored.

  Raises:
    ValueError: `name` is a built-in learner (those stay).
  """
  if any(learner.name == name for learner in BUILT_IN):
    raise ValueError(f'{name!r} is built in')
  _TABLE.pop(name, None)


def names() -> Tuple[str, ...]:
  """The learners a config may name.

  Returns:
    Their names, the built-in ones first.
  """
  return tuple(_TABLE)


def get(name: str) -> Learner:
  """Looks up a learner by name.

  Args:
    name: the config's `loss.name`.

  Returns:
    The learner of that name.

  Raises:
    ValueError: no learner has that name; the message names the choices.
  """
  if name not in _TABLE:
    raise ValueError(f'unknown loss {name!r}; choose one of {", ".join(names())}')
  return _TABLE[name]


def settings_group(config):
  """The run config's group of its learner's own settings.

  Args:
    config: a run config (ml_collections).

  Returns:
    The group the learner's `config_group` names (`vtrace`, `ppo`, ...).

  Raises:
    ValueError: `config.loss.name` is not a registered learner.
  """
  return config[get(config.loss.name).config_group]


def settings(config):
  """The frozen settings of the run config's learner.

  Args:
    config: a run config (ml_collections).

  Returns:
    What the learner's `settings_from` makes of its settings group (e.g. an
    rl/impala.VTraceConfig).

  Raises:
    ValueError: `config.loss.name` is not a registered learner.
  """
  return get(config.loss.name).settings_from(settings_group(config))


def optimizer_steps_per_update(config) -> int:
  """Optimiser steps per learner update (e.g. epochs x minibatches).

  Args:
    config: a run config (ml_collections).

  Returns:
    The learner's `optimizer_steps` of its settings.

  Raises:
    ValueError: `config.loss.name` is not a registered learner.
  """
  return get(config.loss.name).optimizer_steps(settings(config))


def loss_config(config) -> LossConfig:
  """The LossConfig of a run config.

  A config without `optimizer.clip_by` (runs written before it existed) reads
  'global': no per-term clip.

  Args:
    config: a run config (ml_collections).

  Returns:
    The LossConfig: discount, loss weights, reward mode, PopArt, reduction,
    the learner's name and frozen settings, the number of tasks, and whether
    the gradient is clipped per term (`optimizer.clip_by == 'term'`).

  Raises:
    ValueError: `config.loss.name` is not a registered learner.
  """
  return LossConfig(
      discount=config.discount, baseline_cost=config.baseline_cost,
      entropy_cost=config.entropy_cost, reward_mode=config.reward_mode,
      popart_enabled=config.popart.enabled, popart_beta=config.popart.beta,
      reduction=config.loss_reduction, name=config.loss.name, settings=settings(config),
      num_tasks=len(config.tasks),
      # Runs written before clip_by existed read 'global'.
      clip_per_term=config.optimizer.get('clip_by', 'global') == 'term')
