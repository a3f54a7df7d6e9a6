"""The environment families a run knows (envs/family.py), looked up by env
id, and what the rest of the code asks of envs through them: the spaces,
an actor's batch of envs, action names, evaluation envs, a task's kwargs.

`register(family)` adds a family (a subclass of family.EnvFamily); the
built-in ones are envs/families.py's.
"""

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

  Args:
    family: an instance of a family.EnvFamily subclass.

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
  """Removes a registered family.

  Args:
    name: the family's name.

  Raises:
    KeyError: when no family has that name.
  """
  for i, f in enumerate(_FAMILIES):
    if f.name == name:
      del _FAMILIES[i]
      return
  raise KeyError(name)


def family_of(env_id: str) -> EnvFamily:
  """The family of an env id.

  Args:
    env_id: an env id, e.g. 'Pong-v5'.

  Returns:
    The first registered family whose `matches(env_id)` is true.

  Raises:
    KeyError: for ids no family knows.
  """
  for f in _FAMILIES:
    if f.matches(env_id):
      return f
  raise KeyError(env_id)


def env_family(env_id: str) -> str:
  """The name of an env id's family.

  Args:
    env_id: an env id.

  Returns:
    'envpool', 'nle', 'synthetic', or a registered family's name.

  Raises:
    KeyError: for ids no family knows.
  """
  return family_of(env_id).name


def actor_kind(env_id: str) -> str:
  """How the actor sizing treats an env id's envs.

  Args:
    env_id: an env id.

  Returns:
    Its family's actor_kind, one of family.ACTOR_KINDS.

  Raises:
    KeyError: for ids no family knows.
  """
  return family_of(env_id).actor_kind


def known_env_ids_hint() -> str:
  """The families' id hints joined ('..., ... or ...'), for the unknown-id error."""
  hints = [f.ids_hint() for f in _FAMILIES]
  return ', '.join(hints[:-1]) + ' or ' + hints[-1] if len(hints) > 1 else hints[0]


def env_spaces(env_id: str, env_kwargs: Dict[str, Any],
               observation_keys: Optional[Sequence[str]] = None, with_num_actions: bool = True,
               ) -> Tuple[Optional[int], Dict[str, tuple]]:
  """The spaces of a task's env, as its batched env reports them, without starting envs.

  Args:
    env_id: the task's env id.
    env_kwargs: the task's env kwargs.
    observation_keys: the keys the run reads (None: all the family can give).
    with_num_actions: False lets a family skip counting the actions (None)
      where that is costly.

  Returns:
    (number of actions, {observation key: (shape, dtype)}), as
    family.EnvFamily.spaces gives them.

  Raises:
    family.EnvKwargsError: naming kwargs the env does not take.
    KeyError: for ids no family knows.
  """
  return family_of(env_id).spaces(env_id, env_kwargs, observation_keys, with_num_actions)


def frames_per_step(env_id: str, env_kwargs: Dict[str, Any]) -> int:
  """Emulator frames per agent step of a task's env.

  Args:
    env_id: the task's env id.
    env_kwargs: the task's env kwargs.

  Returns:
    An int: 4 for Atari (its `frame_skip`), 1 for the others built in.
  """
  return family_of(env_id).frames_per_step(env_id, env_kwargs)


@dataclasses.dataclass(frozen=True)
class EnvGroup:
  """`num_envs` envs of one task inside one actor.

  `reward_scale` multiplies the task's rewards; `env_kwargs` are the task's
  (task_env_kwargs).
  """
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
  """One batched env for an actor.

  Its groups' families make their batches: first an EnvPool pool or a numpy
  env per group, in group order; then the families that batch their groups
  together, NLE's tasks sharing one set of worker processes per env id. The
  env axis follows that order, not necessarily the groups'.

  Args:
    groups: the actor's EnvGroups.
    seed: the actor's env seed.
    envpool_threads: EnvPool threads per pool (0: EnvPool's default).
    nle_workers: NLE worker processes per env id.
    observation_keys: the observation keys the network reads.
    nle_savedir: where NLE writes ttyrecs; None: none.

  Returns:
    A ConcatEnv of the batches.

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
  """Readable names of an env's actions, for the action-distribution metrics.

  Args:
    env_id: the task's env id.
    env_kwargs: the task's env kwargs.
    num_actions: the env's number of actions.

  Returns:
    A tuple of `num_actions` names: its family's (family.EnvFamily.action_names),
    or 'a0', 'a1', ... where it has none or they are not `num_actions`
    distinct names.
  """
  names = family_of(env_id).action_names(env_id, env_kwargs)
  names = None if names is None else list(names)
  if names is None or len(names) != num_actions or len(set(names)) != len(names):
    names = [f'a{i}' for i in range(num_actions)]
  return tuple(names)


def evaluation_env(env_id: str, task_id: int, env_kwargs: Dict[str, Any], num_envs: int,
                   seed: int, video: bool, observation_keys: Sequence[str], workers: int):
  """An env for evaluating a task: the evaluation_env of the family that
  matches `env_id`, with the same arguments and return value
  (envs/family.EnvFamily.evaluation_env says what each is)."""
  return family_of(env_id).evaluation_env(env_id, task_id, env_kwargs, num_envs, seed, video,
                                          observation_keys, workers)


def task_env_kwargs(task: Dict[str, Any], num_tasks: int, atari_group=None,
                    training: bool = True) -> Dict[str, Any]:
  """A task's env kwargs, the one recipe for training and evaluation.

  Atari games get IMPALA's protocol (atari.protocol_kwargs of the config's
  `atari` group, `atari_group`: needed for them), for training or, with
  `training=False`, for evaluation (whole games, no life loss as an end);
  the task's own kwargs go on top. In evaluation, a NetHack task named for
  a role and playing random characters plays that role (race, alignment
  and gender still random), so each such task gets exactly its episodes.

  Args:
    task: a task of the config: 'env_id', 'name' and optional 'env_kwargs'.
    num_tasks: the run's number of tasks (Atari's action set).
    atari_group: the config's `atari` group; needed for Atari tasks.
    training: False for evaluation.

  Returns:
    A new dict of env kwargs.
  """
  own = dict(task.get('env_kwargs', {}))
  if atari.game_of(task['env_id']) is not None:
    return {**atari.protocol_kwargs(atari_group, num_tasks, training=training), **own}
  if not training and own.get('character') == nethack.RANDOM and task['name'] in nethack.ROLES:
    own['character'] = task['name']
  return own
