"""The env families a run knows (envs/family.py), looked up by env id, and what the code asks of
envs through them. `register(family)` adds one; the built-in ones are envs/families.py's."""

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from envs import families
from envs.concat import ConcatEnv
from envs.family import BatchContext, EnvFamily, Resources, Settings

_FAMILIES: List[EnvFamily] = list(families.builtin())


def register(family: EnvFamily) -> None:
  """Adds an env family, looked up after those registered before it.

  Raises:
    ValueError: not an EnvFamily, or its name or a settings group's name is taken.
  """
  if not isinstance(family, EnvFamily):
    raise ValueError(f'{family!r} is not an envs.family.EnvFamily')
  if any(f.name == family.name for f in _FAMILIES):
    raise ValueError(f'an env family named {family.name!r} is already registered')
  taken = sorted(set(family.settings_groups) & set(settings_groups()))
  if taken:
    raise ValueError(f'the settings group {taken[0]!r} of env family {family.name!r} is '
                     'already registered')
  _FAMILIES.append(family)


def unregister(name: str) -> None:
  """Removes the registered family named `name` (KeyError for none)."""
  for i, f in enumerate(_FAMILIES):
    if f.name == name:
      del _FAMILIES[i]
      return
  raise KeyError(name)


def family_of(env_id: str) -> EnvFamily:
  """The first registered family that matches `env_id`; KeyError for none."""
  for f in _FAMILIES:
    if f.matches(env_id):
      return f
  raise KeyError(env_id)


def env_family(env_id: str) -> str:
  """The name of an env id's family; KeyError for ids no family knows."""
  return family_of(env_id).name


def registered() -> Tuple[EnvFamily, ...]:
  """The registered families, in lookup order."""
  return tuple(_FAMILIES)


def settings_groups() -> Dict[str, type]:
  return {name: cls for f in _FAMILIES for name, cls in f.settings_groups.items()}


def default_settings() -> Dict[str, Any]:
  """Every registered family's settings groups at their defaults (for envs made outside a run)."""
  return {name: cls() for name, cls in settings_groups().items()}


def family_owning(group: str) -> str:
  """The name of the family whose settings group is `group`; KeyError for none."""
  for f in _FAMILIES:
    if group in f.settings_groups:
      return f.name
  raise KeyError(group)


def normalised_score(env_id: str, episode_return: float) -> Optional[float]:
  """The return on its family's shared scale (EnvFamily.normalised_score), or None."""
  return family_of(env_id).normalised_score(env_id, episode_return)


def known_env_ids_hint() -> str:
  """The families' id hints joined ('..., ... or ...'), for the unknown-id error."""
  hints = [f.ids_hint() for f in _FAMILIES]
  return ', '.join(hints[:-1]) + ' or ' + hints[-1] if len(hints) > 1 else hints[0]


def env_spaces(env_id: str, env_kwargs: Dict[str, Any],
               observation_keys: Optional[Sequence[str]] = None, with_num_actions: bool = True,
               ) -> Tuple[Optional[int], Dict[str, tuple]]:
  """(number of actions, {observation key: (shape, dtype)}) of a task's env, without starting envs:
  family.EnvFamily.spaces of its family; KeyError for ids no family knows."""
  return family_of(env_id).spaces(env_id, env_kwargs, observation_keys, with_num_actions)


@dataclasses.dataclass(frozen=True)
class EnvGroup:
  """`num_envs` envs of one task inside one actor."""
  task_id: int
  env_id: str
  env_kwargs: Dict[str, Any]
  reward_scale: float
  num_envs: int
  # For families that deal each episode a role (EnvFamily.role_task_ids):
  # the task id of each role; each episode takes its dealt role's id.
  role_task_ids: Optional[Tuple[int, ...]] = None


def batch_context(family: EnvFamily, resources: Mapping[str, Resources], settings: Settings,
                  observation_keys: Sequence[str], workdir: Optional[str] = None
                  ) -> BatchContext:
  """A family's BatchContext from the run's resources (family name -> its
  counts per actor) and settings groups."""
  return BatchContext(resources=dict(resources.get(family.name, {})), settings=settings,
                      observation_keys=tuple(observation_keys), workdir=workdir)


def make_actor_envs(groups: Sequence[EnvGroup], seed: int, resources: Mapping[str, Resources],
                    settings: Settings, observation_keys: Sequence[str],
                    workdir: Optional[str] = None) -> ConcatEnv:
  """One batched env for an actor, a ConcatEnv of its families' batches.

  The env axis holds first the batches made one group at a time (in group
  order), then those of families that batch their groups together (NLE's
  tasks sharing workers per env id): not necessarily the groups' order.

  Args:
    resources: family name -> its counts per actor (EnvFamily.size).
    workdir: the run folder, for families that write there; None: none.

  Raises:
    ValueError: for batches that differ in observation spec or action count.
    KeyError: for ids no family knows.
  """
  parts: List = []
  together: Dict[str, Tuple[EnvFamily, List]] = {}
  for i, g in enumerate(groups):
    family = family_of(g.env_id)
    if family.batches_together:
      together.setdefault(family.name, (family, []))[1].append((i, g))
    else:
      parts.extend(family.make_batches(
          [(i, g)], seed, batch_context(family, resources, settings, observation_keys, workdir)))
  for family, items in together.values():
    parts.extend(family.make_batches(
        items, seed, batch_context(family, resources, settings, observation_keys, workdir)))
  return ConcatEnv(parts)


def action_names(env_id: str, env_kwargs: Dict[str, Any], num_actions: int) -> tuple:
  """`num_actions` readable action names: its family's, or 'a0', 'a1', ...
  where it has none or they are not `num_actions` distinct names."""
  names = family_of(env_id).action_names(env_id, env_kwargs)
  names = None if names is None else list(names)
  if names is None or len(names) != num_actions or len(set(names)) != len(names):
    names = [f'a{i}' for i in range(num_actions)]
  return tuple(names)


def task_env_kwargs(task: Dict[str, Any], num_tasks: int, settings: Settings,
                    training: bool = True) -> Dict[str, Any]:
  """A task's env kwargs (training and evaluation alike): its family's EnvFamily.task_env_kwargs."""
  return family_of(task['env_id']).task_env_kwargs(task, num_tasks, settings, training)
