"""The table of learners: the config's `loss.name` -> its rl/actor_critic.Learner.

A new loss is one module in rl/ that defines a Learner, plus one line in
BUILT_IN or a `register(learner)` before the config is made.
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
  """Adds a learner under its name (its `config_group` must be in the config);
  ValueError if the name is taken."""
  if learner.name in _TABLE:
    raise ValueError(f'a learner named {learner.name!r} is registered already')
  _TABLE[learner.name] = learner


def unregister(name: str) -> None:
  """Removes a learner that `register` added (ValueError for a built-in one);
  an unknown name is ignored."""
  if any(learner.name == name for learner in BUILT_IN):
    raise ValueError(f'{name!r} is built in')
  _TABLE.pop(name, None)


def names() -> Tuple[str, ...]:
  """The learners a config may name, the built-in ones first."""
  return tuple(_TABLE)


def get(name: str) -> Learner:
  """The learner of the config's `loss.name`; ValueError (naming the choices) if none."""
  if name not in _TABLE:
    raise ValueError(f'unknown loss {name!r}; choose one of {", ".join(names())}')
  return _TABLE[name]
