"""The built-in environment families (envs/family.py): EnvPool, NLE, and the
small numpy envs stepped in the actor thread (Catch)."""

import functools
from typing import Any, Dict, List, Tuple

import envpool
import gymnasium as gym
import numpy as np

from envs import atari
from envs import catch
from envs import nethack
from envs import render
from envs.envpool_env import EnvPoolConfig, EnvPoolEnv, observation_key
from envs.family import EnvFamily, EnvKwargsError
from envs.nle_env import NLE_ENV_IDS, NLEBatchedEnv, NLEConfig, is_nle_env
from envs.nle_worker import DERIVED_OBS, observation_desc
from infra.settings import SettingsError

NLE_VIDEO_FPS = 8.0        # NetHack has no clock; slow enough to read the screen
CLASSIC_VIDEO_FPS = 50.0   # CartPole's 0.02 s time step

# How each family sizes its envs' stepping in a run's cores (docs/speed.md, "How actors are sized"):
# EnvPool: one actor thread per 4 cores, 2 to 8 (two or more overlap policy steps with env steps);
# threads per pool max(2, max(cores, 4) // (actors * pools)), at most a pool's envs.
CORES_PER_ENVPOOL_ACTOR = 4
MIN_ENVPOOL_ACTORS = 2
MAX_ENVPOOL_ACTORS = 8
MIN_ENVPOOL_THREAD_BUDGET = 4
MIN_ENVPOOL_THREADS_PER_POOL = 2
# NLE: an actor thread per 8 cores, 1 to 4; workers per actor max(2, cores // actors), <= its envs.
CORES_PER_NLE_ACTOR = 8
MAX_NLE_ACTORS = 4
MIN_NLE_WORKERS = 2

# EnvPool config fields that are the batch's, not a task's env_kwargs.
_ENVPOOL_BATCH_FIELDS = ('num_envs', 'batch_size', 'num_threads', 'seed', 'max_num_players',
                         'thread_affinity_offset', 'base_path', 'env_seed',
                         'gym_reset_return_info')

# ALE's full action set, in its action-id order.
ATARI_FULL_ACTIONS = (
    'NOOP', 'FIRE', 'UP', 'RIGHT', 'LEFT', 'DOWN', 'UPRIGHT', 'UPLEFT', 'DOWNRIGHT',
    'DOWNLEFT', 'UPFIRE', 'RIGHTFIRE', 'LEFTFIRE', 'DOWNFIRE', 'UPRIGHTFIRE',
    'UPLEFTFIRE', 'DOWNRIGHTFIRE', 'DOWNLEFTFIRE')

# The observation keys an NLE env can give (NLE's own and DERIVED_OBS).
NLE_OBSERVATION_KEYS = ('glyphs', 'chars', 'colors', 'specials', 'blstats', 'message',
                        'inv_glyphs', 'inv_letters', 'inv_oclasses', 'inv_strs',
                        'tty_chars', 'tty_colors', 'tty_cursor', 'under_hero')


def _draw_env_0(env):
  return lambda result: env.render([0])[0]


def _plural(n: int, word: str) -> str:
  return f'{n} {word}{"s" * (n != 1)}'


@functools.lru_cache(maxsize=256)
def _cached_spec(env_id, kwargs_items):
  return envpool.make_spec(env_id, **dict(kwargs_items))


def _envpool_spec(env_id, env_kwargs):
  """EnvPool's spec of `env_id` with `env_kwargs`, cached per process for hashable kwargs (slow to
  make; validation makes one per task); TypeError, never cached, when EnvPool rejects the kwargs."""
  items = tuple(sorted(env_kwargs.items()))
  try:
    hash(items)
  except TypeError:
    return envpool.make_spec(env_id, **env_kwargs)
  return _cached_spec(env_id, items)

class EnvPoolFamily(EnvFamily):
  """Every id EnvPool lists: Atari games ('<Game>-v5', frames) and classic
  control (a state vector); one pool per task per actor."""

  name = 'envpool'
  settings_groups = {'atari': atari.AtariConfig, 'envpool': EnvPoolConfig}

  def __init__(self):
    self.ids = tuple(envpool.list_all_envs())

  def matches(self, env_id):
    return env_id in self.ids

  def ids_hint(self):
    classic = [e for e in self.ids if not e.endswith('-v5')]
    return (f'an EnvPool id (e.g. {", ".join(classic[:4])}, or any Atari "<Game>-v5" '
            f'such as Pong-v5)')

  def spaces(self, env_id, env_kwargs, observation_keys=None, with_num_actions=True):
    """EnvFamily.spaces from EnvPool's spec (one key, actions always counted);
    EnvKwargsError names the keys the env takes."""
    try:
      spec = _envpool_spec(env_id, env_kwargs)
    except TypeError:
      allowed = ', '.join(k for k in envpool.make_spec(env_id).config._fields
                          if k not in _ENVPOOL_BATCH_FIELDS)
      raise EnvKwargsError(f'{env_kwargs} is not valid for {env_id}; allowed keys: '
                           f'{allowed}') from None
    space = spec.observation_space
    return (int(spec.action_space.n),
            {observation_key(space.shape): (tuple(space.shape), np.dtype(space.dtype))})

  def task_env_kwargs(self, task, num_tasks, settings, training):
    """An Atari game's: IMPALA's protocol (atari.protocol_kwargs of the `atari`
    group) under the task's own kwargs; classic control's: its own."""
    own = dict(task.get('env_kwargs', {}))
    if atari.game_of(task['env_id']) is None:
      return own
    return {**atari.protocol_kwargs(settings['atari'], num_tasks, training=training), **own}

  def check_tasks(self, tasks, num_tasks, settings):
    games = [t for _, t in tasks if atari.game_of(t['env_id']) is not None]
    if games and num_tasks > 1 and settings['atari'].action_set == 'minimal':
      raise SettingsError('atari.action_set', "'minimal' cannot hold several games (their "
                          "action sets differ); use 'auto' or 'full'")

  def normalised_score(self, env_id, episode_return):
    return atari.human_normalised(atari.game_of(env_id), episode_return)

  def actor_threads(self, cores):
    return min(MAX_ENVPOOL_ACTORS, max(MIN_ENVPOOL_ACTORS, cores // CORES_PER_ENVPOOL_ACTOR))

  def size(self, cores, num_actors, envs_per_actor, num_tasks, settings):
    """{'threads': per pool, 'pools': per actor (one per task)}: `envpool.threads`
    or, at 0, the rule of the module's constants."""
    threads, chosen = settings['envpool'].threads, ()
    if not threads:
      budget = max(cores, MIN_ENVPOOL_THREAD_BUDGET)
      threads = min(max(1, envs_per_actor // num_tasks),
                    max(MIN_ENVPOOL_THREADS_PER_POOL, budget // (num_actors * num_tasks)))
      chosen = ('envpool.threads',)
    return {'threads': threads, 'pools': num_tasks}, chosen

  def describe(self, resources, num_actors, num_tasks):
    threads, pools = resources['threads'], resources['pools']
    return (f'{_plural(threads, "EnvPool thread")} per pool ({_plural(pools, "pool")} per '
            f'actor, {threads * pools * num_actors} threads in all)')

  def frames_per_step(self, env_id, env_kwargs):
    if atari.game_of(env_id) is None:
      return 1
    return int(env_kwargs.get('frame_skip', atari.FRAME_SKIP))

  def make_batches(self, groups, seed, context):
    threads = context.resources.get('threads', 0)
    return [EnvPoolEnv(g.env_id, g.num_envs, g.task_id, dict(g.env_kwargs), g.reward_scale,
                       seed=seed + 1000 * i,
                       num_threads=min(threads, g.num_envs) if threads else 0)
            for i, g in groups]

  def action_names(self, env_id, env_kwargs):
    # EnvPool does not expose the minimal sets' meanings; classic control has none.
    return ATARI_FULL_ACTIONS if env_kwargs.get('full_action_space') else None

  def evaluation_env(self, env_id, task_id, env_kwargs, num_envs, seed, video, context):
    """An EnvPoolEnv rendering when `video`, at Atari's 60 frames a second over
    its action repeat (classic control: CLASSIC_VIDEO_FPS)."""
    env = EnvPoolEnv(env_id, num_envs, task_id, env_kwargs, seed=seed, render=video)
    fps = 60.0 / self.frames_per_step(env_id, env_kwargs) if atari.game_of(env_id) else CLASSIC_VIDEO_FPS
    return env, _draw_env_0(env) if video else None, fps


class NLEFamily(EnvFamily):
  """NetHack's gym ids (NLE), in worker processes shared by an actor's tasks of one env id."""

  name = 'nle'
  settings_groups = {'nle': NLEConfig}
  batches_together = True

  def matches(self, env_id):
    return is_nle_env(env_id)

  def ids_hint(self):
    return f'an NLE id ({", ".join(NLE_ENV_IDS)})'

  def spaces(self, env_id, env_kwargs, observation_keys=None, with_num_actions=True):
    """The spec of the keys asked for (None: NLE_OBSERVATION_KEYS), as
    NLEBatchedEnv reports it; counting the actions makes one NLE env here."""
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

  def task_env_kwargs(self, task, num_tasks, settings, training):
    """Its own kwargs; in evaluation a task named for a role that plays random
    characters plays that role, so each such task gets exactly its episodes."""
    own = dict(task.get('env_kwargs', {}))
    if not training and own.get('character') == nethack.RANDOM and task['name'] in nethack.ROLES:
      own['character'] = task['name']
    return own

  def role_task_ids(self, tasks):
    """The tasks playing random characters ('@'), named one per role, each
    deal every role's task id (nethack.role_task_ids); a single '@' task
    under another name deals none. Fixed characters must be possible."""
    random_tasks = {}
    for i, t, kwargs in tasks:
      if 'character' not in kwargs:
        continue
      try:
        if nethack.parse_character(kwargs['character']) is None:
          random_tasks[t['name']] = i
      except ValueError as e:
        raise SettingsError(f'tasks[{i}].env_kwargs.character', str(e))
    if not random_tasks:
      return {}
    try:
      ids = nethack.role_task_ids(random_tasks)
    except ValueError as e:
      raise SettingsError('tasks', str(e))
    return {} if ids is None else {i: ids for i in random_tasks.values()}

  def actor_threads(self, cores):
    return min(MAX_NLE_ACTORS, max(1, cores // CORES_PER_NLE_ACTOR))

  def size(self, cores, num_actors, envs_per_actor, num_tasks, settings):
    workers = settings['nle'].workers
    if workers:
      return {'workers': workers}, ()
    return ({'workers': min(envs_per_actor, max(MIN_NLE_WORKERS, cores // num_actors))},
            ('nle.workers',))

  def describe(self, resources, num_actors, num_tasks):
    return f'{resources["workers"]} NLE worker processes per actor'

  def make_batches(self, groups, seed, context):
    """One NLEBatchedEnv per env id for all the groups given; ttyrecs under <workdir>/nle."""
    savedir = (f'{context.workdir}/nle' if context.settings['nle'].ttyrecs and context.workdir
               else None)
    by_id: Dict[str, List] = {}
    for _, g in groups:
      by_id.setdefault(g.env_id, []).append(g)
    parts = []
    for j, (env_id, gs) in enumerate(by_id.items()):
      num_envs = sum(g.num_envs for g in gs)
      parts.append(NLEBatchedEnv(
          env_id, num_envs,
          task_ids=[g.task_id for g in gs for _ in range(g.num_envs)],
          env_kwargs=[dict(g.env_kwargs) for g in gs for _ in range(g.num_envs)],
          observation_keys=context.observation_keys,
          reward_scales=[g.reward_scale for g in gs for _ in range(g.num_envs)],
          role_task_ids=[g.role_task_ids for g in gs for _ in range(g.num_envs)],
          num_workers=max(1, min(context.resources.get('workers', 1), num_envs)),
          seed=seed + 7919 * (j + 1), savedir=savedir))
    return parts

  def action_names(self, env_id, env_kwargs):
    """The names of the task's `actions` kwarg, or of NLE's default actions:
    'move_<dir>', 'run_<dir>', or the lower-case NLE name."""
    import nle.env.tasks
    import nle.nethack
    actions = env_kwargs.get('actions') or (
        nle.nethack.ACTIONS if 'Challenge' in env_id else nle.env.tasks.TASK_ACTIONS)
    return [_nle_action_name(a) for a in actions]

  def evaluation_env(self, env_id, task_id, env_kwargs, num_envs, seed, video, context):
    """An NLEBatchedEnv with the run's workers per actor; with `video` it also
    gives the tty observations, which frame_fn draws as a render.TtyFrame."""
    keys = context.observation_keys
    workers = context.resources.get('workers', 1)
    if video:  # the terminal screen, for the video only
      keys += tuple(k for k in ('tty_chars', 'tty_colors') if k not in keys)
    env = NLEBatchedEnv(env_id, num_envs, task_ids=[task_id] * num_envs,
                        env_kwargs=[env_kwargs] * num_envs, observation_keys=keys,
                        num_workers=max(1, min(workers, num_envs)), seed=seed)

    def frame_fn(result):
      return render.TtyFrame(result.obs['tty_chars'][0].copy(),
                             result.obs['tty_colors'][0].copy())

    return env, frame_fn if video else None, NLE_VIDEO_FPS


def _nle_action_name(action) -> str:
  kind = type(action).__name__
  if kind == 'CompassDirection':
    return f'move_{action.name}'
  if kind == 'CompassDirectionLonger':
    return f'run_{action.name}'
  return action.name.lower()


class ModuleFamily(EnvFamily):
  """Small numpy envs of our own, one module each, stepped in the actor thread.

  A module has ENV_ID, ACTION_NAMES, VIDEO_FPS, `observation_spec(env_kwargs)` (ValueError for bad
  kwargs) and an env class taking (env_id, num_envs, task_id, env_kwargs, reward_scale, seed).
  """

  name = 'synthetic'

  def __init__(self, modules: Dict[str, Tuple[Any, Any]]):
    self.modules = dict(modules)   # env id -> (module, env class)

  def matches(self, env_id):
    return env_id in self.modules

  def ids_hint(self):
    return f'a control task ({", ".join(self.modules)})'

  def spaces(self, env_id, env_kwargs, observation_keys=None, with_num_actions=True):
    module = self.modules[env_id][0]
    try:
      return len(module.ACTION_NAMES), module.observation_spec(env_kwargs)
    except ValueError as e:
      raise EnvKwargsError(f'{env_kwargs} is not valid for {env_id}: {e}') from None

  def make(self, env_id, num_envs, task_id, env_kwargs, reward_scale=1.0, seed=0):
    return self.modules[env_id][1](env_id, num_envs, task_id, env_kwargs, reward_scale,
                                   seed=seed)

  def make_batches(self, groups, seed, context):
    return [self.make(g.env_id, g.num_envs, g.task_id, dict(g.env_kwargs), g.reward_scale,
                      seed=seed + 1000 * i) for i, g in groups]

  def action_names(self, env_id, env_kwargs):
    return self.modules[env_id][0].ACTION_NAMES

  def evaluation_env(self, env_id, task_id, env_kwargs, num_envs, seed, video, context):
    env = self.make(env_id, num_envs, task_id, env_kwargs, seed=seed)
    return env, _draw_env_0(env) if video else None, self.modules[env_id][0].VIDEO_FPS


def builtin() -> Tuple[EnvFamily, ...]:
  """New instances of the families every run knows, in lookup order."""
  return (EnvPoolFamily(), NLEFamily(), ModuleFamily({catch.ENV_ID: (catch, catch.CatchEnv)}))
