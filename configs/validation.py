"""Start-up checks of a config; `validate` returns its run plan (configs/plan.py).

Every user mistake becomes a `ConfigError` naming the field and what it
allows, raised before any env, thread or compilation starts.
"""

import math
from typing import List, Sequence, Tuple

import jax

from configs import plan as plan_lib
from configs.plan import RunPlan
from infra import multihost
from rl.optimizers import CLIP_BY, OPTIMIZERS
from rl import algorithms, impala, popart, ppo
from rl.rewards import REWARD_MODES
from configs import atari_common
from envs import atari
from envs import nethack
from envs import registry
from envs.family import EnvKwargsError
from networks.agent import DTYPES
from networks.init import INITS
from networks.kernels import KERNELS
from networks.nethack import EXTRA_INPUTS
from networks.torsos import (CENTRING_NETWORKS, CONV_NETWORKS, EXTRA_INPUT_NETWORKS,
                             NETWORK_NAMES, OBS_KEYS, RECURRENT_NETWORKS, is_recurrent)

WANDB_MODES = ('offline', 'online', 'disabled')
LOSS_REDUCTIONS = ('sum', 'mean')
# The Nature CNN's convolutions (8/4, 4/2, 3/1, no padding) leave no output
# below 36 pixels: 36 -> 8 -> 3 -> 1.
NATURE_CNN_MIN_SIZE = 36


class ConfigError(ValueError):
  def __init__(self, field: str, message: str):
    super().__init__(f'config field {field}: {message}')
    self.field = field


def _field(config, name: str):
  """The value of a dotted field name, e.g. 'optimizer.rmsprop_eps'."""
  value = config
  for part in name.split('.'):
    value = value[part]
  return value


def _non_finite_fields(tree, prefix: str = ''):
  """(field, value) for every NaN or infinite float anywhere in a config
  dict (lists included, e.g. 'reward_scales[1]')."""
  if isinstance(tree, dict):
    for key, value in tree.items():
      yield from _non_finite_fields(value, f'{prefix}.{key}' if prefix else str(key))
  elif isinstance(tree, (list, tuple)):
    for i, value in enumerate(tree):
      yield from _non_finite_fields(value, f'{prefix}[{i}]')
  elif isinstance(tree, float) and not math.isfinite(tree):
    yield prefix, tree


def _check_finite(config) -> None:
  """No NaN or infinity anywhere: one would pass every range check (NaN
  compares false) and poison the learner (a NaN learning rate) or hide a
  mistake (an infinite clip); use a large finite number instead."""
  for field, value in _non_finite_fields(config.to_dict()):
    raise ConfigError(field, f'must be a finite number, got {value!r} (NaN and infinity are '
                      'not allowed in a config; for "no limit" give a large finite number)')


def _positive(config, names: Sequence[str]) -> None:
  for name in names:
    value = _field(config, name)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
      raise ConfigError(name, f'must be a positive number, got {value!r}')


def _check_extra_inputs(network) -> Tuple[str, ...]:
  """network.extra_inputs as a tuple, checked: known names, once each, and a
  network that reads them."""
  extra = network.get('extra_inputs', ())
  if isinstance(extra, str) or not isinstance(extra, (tuple, list)):
    raise ConfigError('network.extra_inputs', f'must be a tuple of names from '
                      f'{", ".join(EXTRA_INPUTS)}, got {extra!r}')
  extra = tuple(extra)
  for name in extra:
    _check_choice('network.extra_inputs', name, EXTRA_INPUTS)
  if len(set(extra)) != len(extra):
    raise ConfigError('network.extra_inputs', f'names an input twice: {extra}')
  if extra and network.name not in EXTRA_INPUT_NETWORKS:
    raise ConfigError('network.extra_inputs', f'{network.name!r} reads no extra inputs; '
                      f'they need network.name in {", ".join(EXTRA_INPUT_NETWORKS)}')
  return extra


def _check_choice(field: str, value, allowed) -> None:
  if value not in allowed:
    raise ConfigError(field, f'{value!r} is not allowed; choose one of {", ".join(map(str, allowed))}')


def _observation_spec(env_id: str, env_kwargs: dict, field: str) -> dict:
  """The env's observation spec, checking its kwargs on the way."""
  try:
    return registry.env_spaces(env_id, env_kwargs, with_num_actions=False)[1]
  except EnvKwargsError as e:
    raise ConfigError(field, str(e))


def _check_tasks(config) -> List[dict]:
  tasks = list(config.tasks)
  if not tasks:
    raise ConfigError('tasks', 'no tasks; list at least one common.task(name, env_id)')
  names = []
  for i, t in enumerate(tasks):
    field = f'tasks[{i}]'
    if not isinstance(t, dict) or not {'name', 'env_id'} <= set(t):
      raise ConfigError(field, 'each task needs a name and an env_id (use configs.common.task)')
    if t['name'] in names:
      raise ConfigError(f'{field}.name', f'{t["name"]!r} is used twice; task names must be unique')
    names.append(t['name'])
    try:
      registry.env_family(t['env_id'])
    except KeyError:
      raise ConfigError(f'{field}.env_id',
                        f'unknown env id {t["env_id"]!r}; use {registry.known_env_ids_hint()}')
  return tasks


def atari_group_of(config):
  """The config's `atari` group, checked, or the protocol defaults where it has none."""
  defaults = atari_common.atari_group()
  group = config.get('atari')
  if group is None:
    return defaults
  unknown = sorted(set(group.keys()) - set(defaults.keys()))
  if unknown:
    raise ConfigError(f'atari.{unknown[0]}', f'unknown field; allowed: {", ".join(defaults.keys())}')
  _check_choice('atari.action_set', group.action_set, atari.ACTION_SETS)
  for name in ('episodic_life', 'sticky_actions', 'fire_reset'):
    if not isinstance(group[name], bool):
      raise ConfigError(f'atari.{name}', f'must be True or False, got {group[name]!r}')
  if isinstance(group.noop_max, bool) or not isinstance(group.noop_max, int) or group.noop_max < 0:
    raise ConfigError('atari.noop_max', f'must be an integer >= 0, got {group.noop_max!r}')
  return group


def task_env_kwargs(config, task: dict, num_tasks: int, training: bool = True) -> dict:
  """A task's env kwargs (envs/registry.task_env_kwargs), the config's
  `atari` group checked where the task is an Atari game; `training=False`:
  for evaluation."""
  group = None
  if atari.game_of(task['env_id']) is not None:
    group = atari_group_of(config)
    if num_tasks > 1 and group.action_set == 'minimal':
      raise ConfigError('atari.action_set', "'minimal' cannot hold several games (their action "
                        "sets differ); use 'auto' or 'full'")
  return registry.task_env_kwargs(task, num_tasks, group, training)


def _random_character_tasks(tasks, env_kwargs):
  """NetHack characters: each fixed one must be possible; tasks playing '@'
  (random characters) get their task id from the role dealt each episode.
  Returns (role -> task id table or None, indices of the '@' tasks)."""
  random_tasks = {}
  for i, t in enumerate(tasks):
    if not registry.family_of(t['env_id']).deals_roles or 'character' not in env_kwargs[i]:
      continue
    try:
      if nethack.parse_character(env_kwargs[i]['character']) is None:
        random_tasks[t['name']] = i
    except ValueError as e:
      raise ConfigError(f'tasks[{i}].env_kwargs.character', str(e))
  if not random_tasks:
    return None, ()
  try:
    return nethack.role_task_ids(random_tasks), tuple(random_tasks.values())
  except ValueError as e:
    raise ConfigError('tasks', str(e))


def check_distributed(config) -> None:
  """The `distributed` group; needs no device (runs before jax.distributed starts)."""
  group = config.get('distributed')
  if group is None:
    raise ConfigError('distributed', 'missing; configs start from configs.common.base_config()')
  for name in ('timeout_seconds', 'connect_timeout_seconds'):
    value = group.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 5:
      raise ConfigError(f'distributed.{name}', f'must be a number of seconds >= 5, got {value!r}')


def _check_learners(config) -> None:
  """Each learner's settings group the config holds, checked by the learner
  itself (rl/algorithms.py; the batch split is checked with the devices);
  then what a learner needs of the rest of the config."""
  for name in algorithms.names():
    learner = algorithms.get(name)
    if learner.config_group not in config:
      if name == config.loss.name:
        raise ConfigError(learner.config_group, f'loss.name={name!r} reads its settings from '
                          f'the config group {learner.config_group!r}, which this config lacks')
      continue
    try:
      settings = learner.settings_from(config[learner.config_group])
    except (AttributeError, KeyError) as e:
      raise ConfigError(learner.config_group, f'lacks a field loss {name!r} reads: {e}') from None
    problem = learner.check(settings)
    if problem is not None:
      raise ConfigError(f'{learner.config_group}.{problem[0]}', problem[1])
  if config.loss.name == ppo.NAME and config.ppo.split == 'steps' and is_recurrent(config.network):
    raise ConfigError('ppo.split', "'steps' shuffles single steps, which a recurrent network "
                      "cannot take (its state runs along the unroll); use 'unrolls'")


# Torso arguments AgentNetwork fills from other network.* fields.
TORSO_FIELDS = {'dtype': 'network.dtype', 'kernels': 'network.kernels',
                'num_centres': 'network.centre_frames'}


def _check_kernels(config) -> None:
  """network.kernels: one of KERNELS, and 'cpu' or 'xla' only for networks with
  convolutions; network.torso_kwargs must not set what network.* fields set."""
  own = sorted(set(dict(config.network.get('torso_kwargs', {}))) & set(TORSO_FIELDS))
  if own:
    raise ConfigError('network.torso_kwargs', f'sets {own}, which come from '
                      + ', '.join(f'{TORSO_FIELDS[k]}' for k in own) + '; set those instead')
  value = config.network.get('kernels', 'auto')
  _check_choice('network.kernels', value, KERNELS)
  if value != 'auto' and config.network.name not in CONV_NETWORKS:
    raise ConfigError('network.kernels', f'network {config.network.name!r} has no convolutions, '
                      f'so {value!r} would change nothing; leave it \'auto\' (networks with '
                      f'convolutions: {", ".join(CONV_NETWORKS)})')


def _check_centring(config) -> None:
  """network.centre_frames: a bool, and only for torsos that read frames through convolutions."""
  value = config.network.get('centre_frames', False)
  if not isinstance(value, bool):
    raise ConfigError('network.centre_frames', f'must be True or False, got {value!r}')
  if value and config.network.name not in CENTRING_NETWORKS:
    raise ConfigError('network.centre_frames', f'network {config.network.name!r} does not centre '
                      f'frames; it works with network.name in {", ".join(CENTRING_NETWORKS)} '
                      f'(or set network.centre_frames=False)')


def _check_minibatch_split(config, per_device_batch: int) -> None:
  """The learner's minibatches must cut every learner device's shard evenly."""
  learner = algorithms.get(config.loss.name)
  problem = learner.batch_split(algorithms.settings(config), per_device_batch,
                                config.unroll_length)
  if problem is not None:
    raise ConfigError(f'{learner.config_group}.{problem[0]}', problem[1])


def validate(config) -> RunPlan:
  """Checks every field a run depends on; returns the derived RunPlan."""
  _check_finite(config)
  _positive(config, ['total_env_steps', 'batch_size', 'unroll_length', 'learning_rate',
                     'actors.envs_per_actor', 'actors.queue_size', 'optimizer.max_grad_norm',
                     'optimizer.rmsprop_eps', 'popart.beta'])
  for name in ('keep_intermediate', 'optimizer.eps_in_sqrt', 'actors.wait_for_learner',
               'log.progress', 'log.tensorboard'):
    value = _field(config, name)
    if not isinstance(value, bool):
      raise ConfigError(name, f'must be True or False, got {value!r}')
  for name in ('checkpoint_every_steps', 'baseline_cost', 'entropy_cost', 'optimizer.momentum',
               'log.task_gradients_seconds', 'pause_at_env_steps',
               'optimizer.rmsprop_initial_scale', 'network.lstm_size',
               'actors.num_actors', 'actors.envpool_threads', 'actors.nle_workers',
               'actors.cores', 'log.every_seconds', 'num_learner_devices',
               'actor_device_id'):
    value = _field(config, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
      raise ConfigError(name, f'must be a number >= 0, got {value!r}')
  if config.pause_at_env_steps > config.total_env_steps:
    raise ConfigError('pause_at_env_steps', f'{config.pause_at_env_steps:,} is past '
                      f'total_env_steps ({config.total_env_steps:,}); use at most that, or 0')
  _check_choice('loss_reduction', config.loss_reduction, LOSS_REDUCTIONS)
  _check_choice('loss.name', config.loss.name, algorithms.names())
  _check_choice('optimizer.name', config.optimizer.name, OPTIMIZERS)
  _check_choice('network.init', config.network.init, INITS)
  _positive(config, ['optimizer.adam_eps'])
  for name in ('optimizer.adam_b1', 'optimizer.adam_b2'):
    value = _field(config, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
      raise ConfigError(name, f'must be in [0, 1), got {value!r}')
  _check_learners(config)
  _check_choice('popart.start', config.popart.start, popart.STARTS)
  if config.popart.start != 'identity' and not config.popart.enabled:
    raise ConfigError('popart.start', f'{config.popart.start!r} needs popart.enabled=True '
                      '(without PopArt there are no statistics to start)')
  _check_choice('optimizer.clip_by', config.optimizer.clip_by, CLIP_BY)
  if config.optimizer.clip_by == 'term' and config.loss.name != impala.NAME:
    raise ConfigError('optimizer.clip_by', f"'term' is implemented for loss.name={impala.NAME!r} "
                      f'(V-trace), not {config.loss.name!r}; use clip_by=global')
  if not 0.0 <= config.discount <= 1.0:
    raise ConfigError('discount', f'must be in [0, 1], got {config.discount}')
  if not 0.0 < config.popart.beta <= 1.0:
    raise ConfigError('popart.beta', f'must be in (0, 1], got {config.popart.beta}')
  if not 0.0 <= config.optimizer.rmsprop_decay < 1.0:
    raise ConfigError('optimizer.rmsprop_decay', f'must be in [0, 1), got {config.optimizer.rmsprop_decay}')
  _check_choice('reward_mode', config.reward_mode, REWARD_MODES)
  _check_choice('network.name', config.network.name, NETWORK_NAMES)
  _check_centring(config)
  _check_kernels(config)
  _check_choice('network.dtype', config.network.get('dtype', 'auto'), DTYPES)
  _check_choice('wandb.mode', config.wandb.mode, WANDB_MODES)
  if config.network.name in RECURRENT_NETWORKS and not config.network.lstm_size:
    raise ConfigError('network.lstm_size', f'{config.network.name!r} is recurrent and needs '
                      'an LSTM size > 0 (e.g. 256)')

  tasks = _check_tasks(config)
  num_tasks = len(tasks)
  scales = tuple(config.reward_scales)
  if scales and len(scales) != num_tasks:
    raise ConfigError('reward_scales', f'has {len(scales)} values for {num_tasks} tasks; '
                      'give one per task or () for all 1.0')
  if any(not isinstance(s, (int, float)) or not math.isfinite(s) for s in scales):
    raise ConfigError('reward_scales', f'must be finite numbers, got {scales}')
  scales = scales or (1.0,) * num_tasks
  env_kwargs = [task_env_kwargs(config, t, num_tasks) for t in tasks]
  role_ids, random_tasks = _random_character_tasks(tasks, env_kwargs)

  obs_keys = OBS_KEYS[config.network.name] + _check_extra_inputs(config.network)
  frames_per_step = 1
  families = []
  for i, t in enumerate(tasks):
    families.append(registry.actor_kind(t['env_id']))
    spec = _observation_spec(t['env_id'], env_kwargs[i], f'tasks[{i}].env_kwargs')
    frames_per_step = max(frames_per_step, registry.frames_per_step(t['env_id'], env_kwargs[i]))
    frame_size = spec['frames'][0][1:] if 'frames' in spec else None
    if config.network.name == 'shallow' and frame_size and min(frame_size) < NATURE_CNN_MIN_SIZE:
      raise ConfigError(f'tasks[{i}].env_kwargs', f'frames of {frame_size[0]}x{frame_size[1]} '
                        f"are too small for 'shallow' (the Nature CNN's valid convolutions "
                        f'need at least {NATURE_CNN_MIN_SIZE}x{NATURE_CNN_MIN_SIZE})')
    provided = tuple(spec)
    missing = [k for k in obs_keys if k not in provided]
    if missing:
      raise ConfigError('network.name', f'{config.network.name!r} reads {missing} but '
                        f'{t["env_id"]} (task {t["name"]}) gives {list(provided)}')

  devices = jax.local_devices()
  n_learn = config.num_learner_devices or len(devices)  # per process (all have as many)
  if n_learn > len(devices):
    raise ConfigError('num_learner_devices', f'{n_learn} requested but only '
                      f'{len(devices)} local devices; use 0 for all or 1..{len(devices)}')
  if config.actor_device_id >= len(devices):
    raise ConfigError('actor_device_id', f'must be in 0..{len(devices) - 1}')
  # batch_size is global: every process's actors fill an equal share of it.
  processes = jax.process_count()
  n_global = n_learn * processes
  if config.batch_size % n_global:
    where = f' ({n_learn} on each of {processes} processes)' if processes > 1 else ''
    raise ConfigError('batch_size', f'{config.batch_size} is not divisible by the '
                      f'{n_global} learner devices{where}; use a multiple of {n_global}')
  _check_minibatch_split(config, config.batch_size // n_global)
  envs = config.actors.envs_per_actor
  if envs % num_tasks:
    raise ConfigError('actors.envs_per_actor', f'{envs} does not split evenly over '
                      f'{num_tasks} tasks; use a multiple of {num_tasks}')
  local_batch = config.batch_size // processes
  if local_batch % envs:
    share = f' ({local_batch} per process of {processes})' if processes > 1 else ''
    raise ConfigError('batch_size', f'{config.batch_size} unrolls{share} is not a whole number '
                      f'of actor blocks of {envs} envs (actors.envs_per_actor)')
  check_distributed(config)

  return plan_lib.make_plan(config, tasks, env_kwargs, scales, role_ids, random_tasks,
                            tuple(obs_keys), frames_per_step, n_learn, tuple(families))


def validate_everywhere(config) -> RunPlan:
  """`validate` on every process; with several, a mistake found by
  any process (e.g. a device count of its own) stops all of them alike."""
  try:
    plan, problem = validate(config), None
  except ConfigError as e:
    plan, problem = None, e
  if not multihost.is_multiprocess():
    if problem is not None:
      raise problem
    return plan
  problems = multihost.allgather_json(None if problem is None else [problem.field, str(problem)])
  for p, found in enumerate(problems):
    if found is not None:
      field, text = found
      raise ConfigError(field, f'{text.split(": ", 1)[-1]} (found by process {p})')
  return plan
