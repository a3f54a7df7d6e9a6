"""Start-up checks of a config; `validate` returns its run plan (configs/plan.py).

Each group's own checks stand beside its component (infra/settings.py); here are the checks across
components: tasks against envs, the network against their observations, the batch against devices
and minibatches. Every mistake is a `ConfigError` naming the field, raised before any env, thread or
compilation starts.
"""

import math
from typing import Dict, List, Tuple

import jax
import ml_collections

from configs import common
from configs import plan as plan_lib
from configs import resume
from configs import spec as spec_lib
from configs.plan import RunPlan
from configs.spec import RunSpec
from envs import registry
from envs.family import EnvKwargsError
from infra import multihost
from infra import settings
from infra.multihost import DistributedConfig
from networks import torsos
from rl import algorithms

# Nature CNN convs (8/4, 4/2, 3/1, unpadded) need 36 pixels at least: 36 -> 8 -> 3 -> 1.
NATURE_CNN_MIN_SIZE = 36

# A config mistake: 'config field <field>: <why>', with `.field`.
ConfigError = settings.SettingsError


def _non_finite_fields(tree, prefix: str = ''):
  """(field, value) for every NaN or infinite float in a config dict."""
  if isinstance(tree, dict):
    for key, value in tree.items():
      yield from _non_finite_fields(value, f'{prefix}.{key}' if prefix else str(key))
  elif isinstance(tree, (list, tuple)):
    for i, value in enumerate(tree):
      yield from _non_finite_fields(value, f'{prefix}[{i}]')
  elif isinstance(tree, float) and not math.isfinite(tree):
    yield prefix, tree


def _check_finite(config) -> None:
  """No NaN or inf anywhere: NaN passes range checks (it compares false) and poisons learning."""
  for field, value in _non_finite_fields(config.to_dict()):
    raise ConfigError(field, f'must be a finite number, got {value!r} (NaN and infinity are '
                      'not allowed in a config; for "no limit" give a large finite number)')


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


def _env_tasks(tasks, settings) -> tuple:
  """(each task's env kwargs, the roles the families deal, (family, its task
  count) for each family of the run), after each family checked its tasks."""
  num_tasks = len(tasks)
  env_kwargs = [registry.task_env_kwargs(t, num_tasks, settings) for t in tasks]
  by_family: Dict[str, list] = {}
  for i, t in enumerate(tasks):
    by_family.setdefault(registry.env_family(t['env_id']), []).append(i)
  families, roles = [], {}
  for family in registry.registered():
    own = by_family.get(family.name)
    if own:
      family.check_tasks([(i, tasks[i]) for i in own], num_tasks, settings)
      roles.update(family.role_task_ids([(i, tasks[i], env_kwargs[i]) for i in own]))
      families.append((family, len(own)))
  return env_kwargs, roles, tuple(families)


def check_distributed(config) -> DistributedConfig:
  """The `distributed` group, checked without a device (so before jax.distributed starts)."""
  group = config.get('distributed')
  if group is None:
    raise ConfigError('distributed', 'missing; configs start from configs.common.base_config()')
  return settings.read(DistributedConfig, group, 'distributed')


def _learner_groups() -> Dict[str, str]:
  return {algorithms.get(name).config_group: name for name in algorithms.names()}


def _check_learners(config) -> None:
  """Has each learner check its group in the config; the chosen learner's group must be there."""
  for group, name in _learner_groups().items():
    if group in config:
      algorithms.get(name).read_settings(config[group])
    elif name == config.loss.name:
      raise ConfigError(group, f'loss.name={name!r} reads its settings from the config group '
                        f'{group!r}, which this config lacks')


def read_groups(config) -> Dict[str, object]:
  """Every group of the config read into its component's settings.

  Returns:
    '' -> the top-level fields (common.RunConfig), and each group of common.groups() -> its settings
    (an env family's group at its defaults where the config lacks it). The learners' groups are
    checked but not returned (the learner's settings travel in its LossConfig).

  Raises:
    ConfigError: a field or group no component knows, a needed group
      missing, or the first value a component refuses.
  """
  known = dict(common.groups())
  learner_groups = _learner_groups()
  env_groups = registry.settings_groups()
  allowed_groups = set(known) | set(learner_groups)
  if 'loss' not in config:
    raise ConfigError('loss', 'missing; configs start from configs.common.base_config()')
  out = {'loss': settings.read(algorithms.LossChoice, config.loss, 'loss')}
  top = {key: value for key, value in config.items()
         if not (isinstance(value, ml_collections.ConfigDict) and key in allowed_groups)}
  out[''] = settings.read(common.RunConfig, top, '')
  for name, cls in known.items():
    if name in learner_groups or name in out:
      continue
    if name not in config and name not in env_groups:
      raise ConfigError(name, 'missing; configs start from configs.common.base_config()')
    out[name] = settings.read(cls, config[name] if name in config else {}, name)  # family: defaults
  _check_learners(config)
  return out


def _learner_settings(config):
  learner = algorithms.get(config.loss.name)
  return learner.read_settings(config[learner.config_group])


def _check_minibatch_split(config, per_device_batch: int) -> None:
  """The learner's minibatches must cut every learner device's shard evenly."""
  learner = algorithms.get(config.loss.name)
  problem = learner.batch_split(_learner_settings(config), per_device_batch,
                                config.unroll_length)
  if problem is not None:
    raise ConfigError(f'{learner.config_group}.{problem[0]}', problem[1])


def _check_across(config, groups) -> None:
  """What one component needs of another's settings."""
  network, name = groups['network'], config.loss.name
  learner = algorithms.get(name)

  def able(ability):
    return ', '.join(repr(n) for n in algorithms.names() if getattr(algorithms.get(n), ability))

  if groups['optimizer'].clip_by == 'term' and not learner.by_term:
    raise ConfigError('optimizer.clip_by', f"'term' is implemented for loss.name={able('by_term')}"
                      f', not {name!r}; use clip_by=global')
  if groups['value'].categorical and not learner.categorical_value:
    raise ConfigError('value.head', f"{groups['value'].head!r} is implemented for "
                      f"loss.name={able('categorical_value')}, not {name!r}; use "
                      "value.head='scalar'")
  if groups['value'].categorical and config.reward_mode == 'h':
    raise ConfigError('value.head', f"{groups['value'].head!r} learns values on its own support "
                      "(PopArt's units, or symlog without PopArt); reward_mode='h' would "
                      "transform them twice: use reward_mode='none' or 'clip'")
  problem = learner.network_check and learner.network_check(_learner_settings(config),
                                                           network.recurrent)
  if problem:
    raise ConfigError(f'{learner.config_group}.{problem[0]}', problem[1])


def _check_observations(config, tasks, env_kwargs, network) -> Tuple[Tuple[str, ...], int]:
  """Every task's env gives what the network reads.

  Returns:
    (the observation keys the network reads, the most frames an env step covers).
  """
  obs_keys = torsos.get(network.name).obs_keys + tuple(network.extra_inputs)
  frames_per_step = 1
  for i, t in enumerate(tasks):
    spec = _observation_spec(t['env_id'], env_kwargs[i], f'tasks[{i}].env_kwargs')
    frames_per_step = max(frames_per_step, registry.family_of(t['env_id']).frames_per_step(
        t['env_id'], env_kwargs[i]))
    frame_size = spec['frames'][0][1:] if 'frames' in spec else None
    if network.name == 'shallow' and frame_size and min(frame_size) < NATURE_CNN_MIN_SIZE:
      raise ConfigError(f'tasks[{i}].env_kwargs', f'frames of {frame_size[0]}x{frame_size[1]} '
                        f"are too small for 'shallow' (the Nature CNN's valid convolutions "
                        f'need at least {NATURE_CNN_MIN_SIZE}x{NATURE_CNN_MIN_SIZE})')
    provided = tuple(spec)
    missing = [k for k in obs_keys if k not in provided]
    if missing:
      raise ConfigError('network.name', f'{network.name!r} reads {missing} but '
                        f'{t["env_id"]} (task {t["name"]}) gives {list(provided)}')
  return obs_keys, frames_per_step


def validate(config) -> RunPlan:
  """The RunPlan of `validate_spec`; raises ConfigError naming the first bad field."""
  return validate_spec(config).plan


def validate_spec(config) -> RunSpec:
  """Checks every field a run depends on; returns the run's RunSpec.

  Raises:
    ConfigError: naming the first field that is unknown or bad, alone or against another.
  """
  _check_finite(config)
  groups = read_groups(config)
  _check_across(config, groups)

  tasks = _check_tasks(config)
  num_tasks = len(tasks)
  scales = tuple(config.reward_scales)
  if scales and len(scales) != num_tasks:
    raise ConfigError('reward_scales', f'has {len(scales)} values for {num_tasks} tasks; '
                      'give one per task or () for all 1.0')
  scales = scales or (1.0,) * num_tasks
  env_settings = {name: groups[name] for name in registry.settings_groups()}
  env_kwargs, roles, families = _env_tasks(tasks, env_settings)
  obs_keys, frames_per_step = _check_observations(config, tasks, env_kwargs, groups['network'])

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

  plan = plan_lib.make_plan(config, tasks, env_kwargs, scales, roles, tuple(obs_keys),
                            frames_per_step, n_learn, families, groups['actors'], env_settings)
  return spec_lib.make_spec(groups, _learner_settings(config), plan, resume.as_source(config))


def validate_everywhere(config) -> RunSpec:
  """`validate_spec` on every process (a collective: all must call it).

  Raises:
    ConfigError: with several processes, the mistake of the lowest-numbered
      process that found one, ending '(found by process <p>)'.
  """
  try:
    spec, problem = validate_spec(config), None
  except ConfigError as e:
    spec, problem = None, e
  if not multihost.is_multiprocess():
    if problem is not None:
      raise problem
    return spec
  problems = multihost.allgather_json(None if problem is None else [problem.field, str(problem)])
  for p, found in enumerate(problems):
    if found is not None:
      field, text = found
      raise ConfigError(field, f'{text.split(": ", 1)[-1]} (found by process {p})')
  return spec
