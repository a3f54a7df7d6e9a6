"""Which family an env id belongs to, what its envs look like (`env_spaces`),
and building an actor's batch of envs."""

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

import envpool
import gymnasium as gym
import numpy as np

from envs import atari
from envs import catch
from envs import nethack
from envs.concat import ConcatEnv
from envs.envpool_env import EnvPoolEnv, observation_key
from envs.nle_env import NLE_ENV_IDS, NLEBatchedEnv, is_nle_env
from envs.nle_worker import DERIVED_OBS, observation_desc

ENVPOOL_IDS = tuple(envpool.list_all_envs())
# Small numpy envs of our own (control tasks); each id's module has
# check_kwargs, observation_spec, ACTION_NAMES and VIDEO_FPS.
SYNTHETIC_ENVS = {catch.ENV_ID: catch}


def env_family(env_id: str) -> str:
  """'envpool', 'nle' or 'synthetic'; KeyError for ids none knows."""
  if env_id in ENVPOOL_IDS:
    return 'envpool'
  if is_nle_env(env_id):
    return 'nle'
  if env_id in SYNTHETIC_ENVS:
    return 'synthetic'
  raise KeyError(env_id)


# The observation keys an NLE env can give (NLE's own and DERIVED_OBS).
NLE_OBSERVATION_KEYS = ('glyphs', 'chars', 'colors', 'specials', 'blstats', 'message',
                        'inv_glyphs', 'inv_letters', 'inv_oclasses', 'inv_strs',
                        'tty_chars', 'tty_colors', 'tty_cursor', 'under_hero')
# EnvPool config fields that are the batch's, not a task's env_kwargs.
_ENVPOOL_BATCH_FIELDS = ('num_envs', 'batch_size', 'num_threads', 'seed', 'max_num_players',
                         'thread_affinity_offset', 'base_path', 'env_seed',
                         'gym_reset_return_info')


class EnvKwargsError(ValueError):
  """A task's env_kwargs that its env does not take."""


def env_spaces(env_id: str, env_kwargs: Dict[str, Any],
               observation_keys: Optional[Sequence[str]] = None, with_num_actions: bool = True,
               ) -> Tuple[Optional[int], Dict[str, tuple]]:
  """(number of actions, {observation key: (shape, dtype)}) of a task's env,
  as its batched env reports them, without starting envs.

  NLE envs give the `observation_keys` asked for (all they can give when
  None); counting NLE's actions makes a gym env, so `with_num_actions=False`
  skips it (None). EnvKwargsError names kwargs the env does not take.
  """
  family = env_family(env_id)
  if family == 'synthetic':
    module = SYNTHETIC_ENVS[env_id]
    try:
      return len(module.ACTION_NAMES), module.observation_spec(env_kwargs)
    except ValueError as e:
      raise EnvKwargsError(f'{env_kwargs} is not valid for {env_id}: {e}') from None
  if family == 'envpool':
    try:
      spec = envpool.make_spec(env_id, **env_kwargs)
    except TypeError:
      allowed = ', '.join(k for k in envpool.make_spec(env_id).config._fields
                          if k not in _ENVPOOL_BATCH_FIELDS)
      raise EnvKwargsError(f'{env_kwargs} is not valid for {env_id}; allowed keys: '
                           f'{allowed}') from None
    space = spec.observation_space
    return (int(spec.action_space.n),
            {observation_key(space.shape): (tuple(space.shape), np.dtype(space.dtype))})
  keys = NLE_OBSERVATION_KEYS if observation_keys is None else tuple(observation_keys)
  spec = {k: observation_desc(k) for k in keys}  # what NLEBatchedEnv reports
  if not with_num_actions:
    return None, spec
  kwargs = {k: v for k, v in env_kwargs.items() if k not in ('max_episode_steps', 'savedir')}
  nle_keys = tuple(k for k in keys if k not in DERIVED_OBS)
  env = gym.make(env_id, observation_keys=nle_keys, save_ttyrec_every=0,
                 disable_env_checker=True, **kwargs)
  num_actions = int(env.action_space.n)
  env.close()
  return num_actions, spec


def known_env_ids_hint() -> str:
  classic = [e for e in ENVPOOL_IDS if not e.endswith('-v5')]
  return (f'an EnvPool id (e.g. {", ".join(classic[:4])}, or any Atari "<Game>-v5" '
          f'such as Pong-v5), an NLE id ({", ".join(NLE_ENV_IDS)}) or a control task '
          f'({", ".join(SYNTHETIC_ENVS)})')


def make_synthetic_env(env_id: str, num_envs: int, task_id: int, env_kwargs: Dict[str, Any],
                       reward_scale: float = 1.0, seed: int = 0):
  """A batch of one of SYNTHETIC_ENVS (so far only Catch-pixels)."""
  if env_id != catch.ENV_ID:
    raise KeyError(env_id)
  return catch.CatchEnv(env_id, num_envs, task_id, env_kwargs, reward_scale, seed=seed)


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
  """One batched env for an actor: an EnvPool pool (or a synthetic env) per
  task, and NLE tasks sharing one set of worker processes per NLE env id."""
  parts: List = []
  nle_groups: Dict[str, List[EnvGroup]] = {}
  for i, g in enumerate(groups):
    family = env_family(g.env_id)
    if family != 'nle' and g.role_task_ids is not None:
      raise ValueError(f'role_task_ids is for NLE envs, not {g.env_id}')
    if family == 'synthetic':
      parts.append(make_synthetic_env(g.env_id, g.num_envs, g.task_id, dict(g.env_kwargs),
                                      g.reward_scale, seed=seed + 1000 * i))
    elif family == 'envpool':
      parts.append(EnvPoolEnv(
          g.env_id, g.num_envs, g.task_id, dict(g.env_kwargs), g.reward_scale,
          seed=seed + 1000 * i,
          num_threads=min(envpool_threads, g.num_envs) if envpool_threads else 0))
    else:
      nle_groups.setdefault(g.env_id, []).append(g)
  for j, (env_id, gs) in enumerate(nle_groups.items()):
    num_envs = sum(g.num_envs for g in gs)
    parts.append(NLEBatchedEnv(
        env_id, num_envs,
        task_ids=[g.task_id for g in gs for _ in range(g.num_envs)],
        env_kwargs=[dict(g.env_kwargs) for g in gs for _ in range(g.num_envs)],
        observation_keys=tuple(observation_keys),
        reward_scales=[g.reward_scale for g in gs for _ in range(g.num_envs)],
        role_task_ids=[g.role_task_ids for g in gs for _ in range(g.num_envs)],
        num_workers=max(1, min(nle_workers, num_envs)),
        seed=seed + 7919 * (j + 1), savedir=nle_savedir))
  return ConcatEnv(parts)


# ALE's full action set, in its action-id order.
ATARI_FULL_ACTIONS = (
    'NOOP', 'FIRE', 'UP', 'RIGHT', 'LEFT', 'DOWN', 'UPRIGHT', 'UPLEFT', 'DOWNRIGHT',
    'DOWNLEFT', 'UPFIRE', 'RIGHTFIRE', 'LEFTFIRE', 'DOWNFIRE', 'UPRIGHTFIRE',
    'UPLEFTFIRE', 'DOWNRIGHTFIRE', 'DOWNLEFTFIRE')


def _nle_action_name(action) -> str:
  kind = type(action).__name__
  if kind == 'CompassDirection':
    return f'move_{action.name}'
  if kind == 'CompassDirectionLonger':
    return f'run_{action.name}'
  return action.name.lower()


def action_names(env_id: str, env_kwargs: Dict[str, Any], num_actions: int) -> tuple:
  """Readable names of an env's actions, for the action-distribution metrics.

  NLE: from the task's action set; Atari with the full action set: ALE's
  names; synthetic envs: their own; otherwise (EnvPool does not expose
  minimal-set meanings, classic control has none) 'a0', 'a1', ...
  """
  names = None
  family = env_family(env_id)
  if family == 'synthetic':
    names = list(SYNTHETIC_ENVS[env_id].ACTION_NAMES)
  elif family == 'nle':
    import nle.env.tasks
    import nle.nethack
    actions = env_kwargs.get('actions') or (
        nle.nethack.ACTIONS if 'Challenge' in env_id else nle.env.tasks.TASK_ACTIONS)
    names = [_nle_action_name(a) for a in actions]
  elif env_kwargs.get('full_action_space'):
    names = list(ATARI_FULL_ACTIONS)
  if names is None or len(names) != num_actions or len(set(names)) != len(names):
    names = [f'a{i}' for i in range(num_actions)]
  return tuple(names)


def task_env_kwargs(task: Dict[str, Any], num_tasks: int, atari_group=None,
                    training: bool = True) -> Dict[str, Any]:
  """A task's env kwargs, the one recipe for training and evaluation.

  Atari games get IMPALA's protocol (atari.protocol_kwargs of the config's
  `atari` group, `atari_group`: needed for them), for training or, with
  `training=False`, for evaluation (whole games, no life loss as an end);
  the task's own kwargs go on top. In evaluation, a NetHack task named for
  a role and playing random characters plays that role (race, alignment
  and gender still random), so each such task gets exactly its episodes.
  """
  own = dict(task.get('env_kwargs', {}))
  if atari.game_of(task['env_id']) is not None:
    return {**atari.protocol_kwargs(atari_group, num_tasks, training=training), **own}
  if not training and own.get('character') == nethack.RANDOM and task['name'] in nethack.ROLES:
    own['character'] = task['name']
  return own
