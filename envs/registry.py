"""The environment families a run knows (envs/family.py), looked up by env
id, and what the rest of the code asks of envs through them.
`register(family)` adds one; the built-in ones are envs/families.py's."""

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

from envs import atari
from envs import families
from envs import nethack
from envs.concat import ConcatEnv
from envs.family import ACTOR_KINDS, EnvFamily

_FAMILIES: List[EnvFamily] = list(families.builtin())


def register(family: EnvFamily) -> None:
  """Adds an env family, looked up after those registered before it.

  Raises:
    ValueError: when it is not an EnvFamily, its actor_kind is not one of
      ACTOR_KINDS, or its name is taken.
  """
  if not isinstance(family, EnvFamily):
    raise ValueError(f'{family!r} is not an envs.family.EnvFamily')
  if family.actor_kind not in ACTOR_KINDS:
    raise ValueError(f'{type(family).__name__}.actor_kind {family.actor_kind!r}: choose one '
                     f'of {", ".join(ACTOR_KINDS)}')
  if any(f.name == family.name for f in _FAMILIES):
    raise ValueError(f'an env family named {family.name!r} is already registered')
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


def actor_kind(env_id: str) -> str:
  """The actor kind (family.ACTOR_KINDS) of an env id's family; KeyError for
  ids no family knows."""
  return family_of(env_id).actor_kind


def known_env_ids_hint() -> str:
  """The families' id hints joined ('..., ... or ...'), for the unknown-id error."""
  hints = [f.ids_hint() for f in _FAMILIES]
  return ', '.join(hints[:-1]) + ' or ' + hints[-1] if len(hints) > 1 else hints[0]


def env_spaces(env_id: str, env_kwargs: Dict[str, Any],
               observation_keys: Optional[Sequence[str]] = None, with_num_actions: bool = True,
               ) -> Tuple[Optional[int], Dict[str, tuple]]:
  """(number of actions, {observation key: (shape, dtype)}) of a task's env,
  without starting envs: family.EnvFamily.spaces of its family.

  Raises:
    family.EnvKwargsError: naming kwargs the env does not take.
    KeyError: for ids no family knows.
  """
  return family_of(env_id).spaces(env_id, env_kwargs, observation_keys, with_num_actions)


def frames_per_step(env_id: str, env_kwargs: Dict[str, Any]) -> int:
  """Emulator frames per agent step of a task's env (4 for Atari)."""
  return family_of(env_id).frames_per_step(env_id, env_kwargs)


@dataclasses.dataclass(frozen=True)
class EnvGroup:
  """`num_envs` envs of one task inside one actor."""
  task_id: int
  env_id: str
  env_kwargs: Dict[str, Any]
  reward_scale: float
  num_envs: int
  # NLE envs dealt random characters ('@'): the task id of each role in
  # envs.nethack.ROLES order; each episode takes its dealt role's id.
  role_task_ids: Optional[Tuple[int, ...]] = None


def make_actor_envs(groups: Sequence[EnvGroup], seed: int, envpool_threads: int,
                    nle_workers: int, observation_keys: Sequence[str],
                    nle_savedir=None) -> ConcatEnv:
  """One batched env for an actor, a ConcatEnv of its families' batches.

  The env axis holds first the batches made one group at a time (in group
  order), then those of families that batch their groups together (NLE's
  tasks sharing workers per env id): not necessarily the groups' order.

  Args:
    envpool_threads: EnvPool threads per pool (0: EnvPool's default).
    nle_workers: NLE worker processes per env id.
    nle_savedir: where NLE writes ttyrecs; None: none.

  Raises:
    ValueError: for role_task_ids on a family that does not deal roles, or
      batches that differ in observation spec or action count.
    KeyError: for ids no family knows.
  """
  settings = {'envpool_threads': envpool_threads, 'nle_workers': nle_workers,
              'observation_keys': tuple(observation_keys), 'nle_savedir': nle_savedir}
  parts: List = []
  together: Dict[str, Tuple[EnvFamily, List]] = {}
  for i, g in enumerate(groups):
    family = family_of(g.env_id)
    if g.role_task_ids is not None and not family.deals_roles:
      raise ValueError(f'role_task_ids is for NLE envs, not {g.env_id}')
    if family.batches_together:
      together.setdefault(family.name, (family, []))[1].append((i, g))
    else:
      parts.extend(family.make_batches([(i, g)], seed, settings))
  for family, items in together.values():
    parts.extend(family.make_batches(items, seed, settings))
  return ConcatEnv(parts)


def action_names(env_id: str, env_kwargs: Dict[str, Any], num_actions: int) -> tuple:
  """`num_actions` readable action names: its family's, or 'a0', 'a1', ...
  where it has none or they are not `num_actions` distinct names."""
  names = family_of(env_id).action_names(env_id, env_kwargs)
  names = None if names is None else list(names)
  if names is None or len(names) != num_actions or len(set(names)) != len(names):
    names = [f'a{i}' for i in range(num_actions)]
  return tuple(names)


def evaluation_env(env_id: str, task_id: int, env_kwargs: Dict[str, Any], num_envs: int,
                   seed: int, video: bool, observation_keys: Sequence[str], workers: int):
  """The matching family's EnvFamily.evaluation_env."""
  return family_of(env_id).evaluation_env(env_id, task_id, env_kwargs, num_envs, seed, video,
                                          observation_keys, workers)


def task_env_kwargs(task: Dict[str, Any], num_tasks: int, atari_group=None,
                    training: bool = True) -> Dict[str, Any]:
  """A task's env kwargs, the one recipe for training and evaluation.

  Atari games get IMPALA's protocol (atari.protocol_kwargs of
  `atari_group`, needed for them) under the task's own kwargs. In
  evaluation a NetHack task named for a role and playing random characters
  plays that role, so each such task gets exactly its episodes.

  Args:
    task: a task of the config: 'env_id', 'name' and optional 'env_kwargs'.
    num_tasks: the run's number of tasks (Atari's action set).
    training: False for evaluation.
  """
  own = dict(task.get('env_kwargs', {}))
  if atari.game_of(task['env_id']) is not None:
    return {**atari.protocol_kwargs(atari_group, num_tasks, training=training), **own}
  if not training and own.get('character') == nethack.RANDOM and task['name'] in nethack.ROLES:
    own['character'] = task['name']
  return own
