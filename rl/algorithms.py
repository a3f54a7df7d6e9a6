"""The table of learners: the config's `loss.name` -> its rl/actor_critic.Learner
(rl/impala.py: V-trace actor-critic; rl/ppo.py: PPO). Everything that depends
on which learner a run uses asks here.

A new loss is one module in rl/ that defines a Learner (its update and its
settings dataclass, infra/settings.py), plus one line in BUILT_IN; or
`register(learner)` from anywhere before the config is made
(configs/common.base_config then holds its settings group).
"""

import dataclasses
from typing import Dict, Tuple

from infra.settings import one_of, setting
from rl import impala
from rl import ppo
from rl.actor_critic import Learner

BUILT_IN: Tuple[Learner, ...] = (impala.LEARNER, ppo.LEARNER)
_TABLE: Dict[str, Learner] = {learner.name: learner for learner in BUILT_IN}


@dataclasses.dataclass(frozen=True)
class LossChoice:
  """The config's `loss` group: which learner trains."""
  name: str = setting(
      'impala', "'impala' (V-trace actor-critic; the `vtrace` group), 'ppo' (the `ppo` group) "
      'or a registered learner', one_of(lambda: names()))


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
