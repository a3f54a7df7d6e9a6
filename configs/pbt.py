"""Population-based training's settings (the config's `pbt` group), checked
before anything starts, and the pure parts of PBT: where members start,
how a perturbed value is kept in its range, and the score members are
ranked by. launch/pbt.py runs the population on Ray Tune.

The score ('auto', the default) is computed from the episodes a member
finished in the interval it just trained, over the last `last_episodes`
of each task:
- one task: the mean return ('return');
- several Atari tasks, each with human and random references: the mean
  of the tasks' human-normalised scores ('human-normalised');
- other multi-task runs: the mean over tasks of the return divided by the
  task's reward scale (returns in each env's own units: 'per-task
  normalised', so a task whose rewards were scaled up does not decide the
  ranking alone).
"""

import dataclasses
import math
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from configs.validation import ConfigError
from envs import atari
from rl import optimizers

STARTS = ('spread', 'random')


@dataclasses.dataclass(frozen=True)
class Settings:
  population: int
  ranges: Dict[str, Tuple[float, float]]   # adapted hyperparameter -> (low, high)
  fields: Dict[str, str]                   # adapted hyperparameter -> its config field
  interval: int                            # env steps per member between exploit steps
  metric: str                              # 'auto' or a logged metric's key
  score_kind: str                          # what 'auto' computes, in words
  last_episodes: int
  quantile: float
  resample_probability: float
  perturb_factors: Tuple[float, ...]
  cpus_per_member: float
  start: str


def loggable_metrics(plan) -> List[str]:
  """Keys a run with this plan logs that can rank members."""
  keys = ['mean_episode_return']
  for task, game in zip(plan.task_names, plan.task_games):
    keys.append(f'episode_return/{task}')
    if atari.human_normalised(game, 0.0) is not None:
      keys.append(f'hns/{task}')
  if len(plan.task_names) > 1 and all(atari.human_normalised(g, 0.0) is not None
                                      for g in plan.task_games):
    keys += ['hns/median', 'hns/mean']
  return keys


def score_kind(plan) -> str:
  if len(plan.task_names) == 1:
    return 'return'
  if all(atari.human_normalised(g, 0.0) is not None for g in plan.task_games):
    return 'human-normalised'
  return 'per-task normalised'


def check(config, plan, population: Optional[int] = None) -> Settings:
  """The config's PBT settings, checked against the run `plan` (a valid
  run's); ConfigError naming the field and the allowed values otherwise."""
  p = config.pbt
  population = p.population if population is None else population
  if not isinstance(population, int) or population < 2:
    raise ConfigError('pbt.population', f'{population!r}: a population needs at least 2 '
                      'members')
  adapt = tuple(p.adapt)
  if not adapt:
    raise ConfigError('pbt.adapt', 'empty; name at least one of '
                      + ', '.join(optimizers.HYPERPARAMETERS))
  fields = {v: k for k, v in optimizers.config_fields(config.optimizer.name).items()}
  ranges = {}
  for name in adapt:
    if name not in optimizers.HYPERPARAMETERS:
      raise ConfigError('pbt.adapt', f'unknown hyperparameter {name!r}; choose from '
                        + ', '.join(optimizers.HYPERPARAMETERS))
    if name in ranges:
      raise ConfigError('pbt.adapt', f'{name!r} is named twice')
    if name not in p.ranges:
      raise ConfigError(f'pbt.ranges.{name}', 'missing: give (low, high)')
    bounds = tuple(p.ranges[name])
    if (len(bounds) != 2 or not all(isinstance(b, (int, float)) and math.isfinite(b)
                                    for b in bounds)):
      raise ConfigError(f'pbt.ranges.{name}', f'{bounds!r}: give two finite numbers (low, high)')
    low, high = float(bounds[0]), float(bounds[1])
    if not 0 < low < high:
      raise ConfigError(f'pbt.ranges.{name}', f'({low:g}, {high:g}) is an empty range; give '
                        '0 < low < high (values are spread and perturbed on a log scale)')
    ranges[name] = (low, high)
  if p.start not in STARTS:
    raise ConfigError('pbt.start', f'{p.start!r}; choose one of {", ".join(STARTS)}')
  interval = p.interval_env_steps or config.total_env_steps // 10
  if not isinstance(interval, int) or interval <= 0 or interval >= config.total_env_steps:
    raise ConfigError('pbt.interval_env_steps', f'{p.interval_env_steps!r}; give env steps in '
                      f'1..{config.total_env_steps - 1:,} (below total_env_steps), or 0 for a '
                      'tenth of it')
  if interval < plan.env_steps_per_update:
    raise ConfigError('pbt.interval_env_steps', f'{interval:,} is less than one learner '
                      f'update ({plan.env_steps_per_update:,} env steps)')
  if p.metric != 'auto' and p.metric not in loggable_metrics(plan):
    raise ConfigError('pbt.metric', f'{p.metric!r} is not a metric this run logs; choose '
                      f'auto or one of {", ".join(loggable_metrics(plan))}')
  if not isinstance(p.last_episodes, int) or p.last_episodes < 1:
    raise ConfigError('pbt.last_episodes', f'{p.last_episodes!r}; give a positive integer')
  if not 0 < p.quantile <= 0.5:
    raise ConfigError('pbt.quantile', f'{p.quantile!r}; give a fraction in (0, 0.5]')
  if math.ceil(p.quantile * population) < 1 or population * p.quantile < 0.5:
    raise ConfigError('pbt.quantile', f'{p.quantile} of {population} members is no member; '
                      'raise it or the population')
  if not 0 <= p.resample_probability <= 1:
    raise ConfigError('pbt.resample_probability', f'{p.resample_probability!r}; give a '
                      'probability in [0, 1]')
  factors = tuple(float(f) for f in p.perturb_factors)
  if not factors or not all(f > 0 for f in factors):
    raise ConfigError('pbt.perturb_factors', f'{p.perturb_factors!r}; give positive multipliers')
  if not p.cpus_per_member > 0:
    raise ConfigError('pbt.cpus_per_member', f'{p.cpus_per_member!r}; give a positive number')
  return Settings(population=population, ranges=ranges,
                  fields={name: fields[name] for name in adapt}, interval=interval,
                  metric=p.metric, score_kind=score_kind(plan), last_episodes=p.last_episodes,
                  quantile=float(p.quantile), resample_probability=float(p.resample_probability),
                  perturb_factors=factors, cpus_per_member=float(p.cpus_per_member),
                  start=p.start)


def starts(settings: Settings, seed: int) -> List[Dict[str, float]]:
  """Each member's starting hyperparameters. 'spread': member i of n gets,
  for every hyperparameter, one of n values log-evenly spaced from low to
  high (shuffled per hyperparameter, so that members differ in all of
  them at once); 'random': log-uniform draws."""
  rng = np.random.default_rng(seed)
  n = settings.population
  columns = {}
  for name, (low, high) in settings.ranges.items():
    if settings.start == 'spread':
      values = np.geomspace(low, high, n)
      columns[name] = values if len(settings.ranges) == 1 else rng.permutation(values)
    else:
      columns[name] = np.exp(rng.uniform(np.log(low), np.log(high), n))
  return [{name: float(columns[name][i]) for name in settings.ranges} for i in range(n)]


def clip(values: Dict[str, float], settings: Settings) -> Dict[str, float]:
  """Perturbed values kept inside their ranges."""
  out = dict(values)
  for name, (low, high) in settings.ranges.items():
    if name in out:
      out[name] = float(min(max(out[name], low), high))
  return out


def apply(config, values: Dict[str, float], settings: Settings) -> None:
  """Sets the adapted hyperparameters' config fields (config unlocked)."""
  for name, value in values.items():
    section, _, field = settings.fields[name].rpartition('.')
    (config[section] if section else config)[field] = float(value)


def score(windows: Sequence[Dict], plan, settings: Settings,
          reward_scales: Sequence[float]) -> Optional[float]:
  """A member's score from the log rows of the interval it just trained
  (oldest first), or None when no episode ended in it.

  'auto': per task, the mean return of its last `last_episodes` episodes,
  read from the rows' per-window means and episode counts (the newest rows
  first; the oldest row used counts in part), combined as the module's
  docstring says. Another metric: its newest logged value."""
  if settings.metric != 'auto':
    for row in reversed(windows):
      value = row.get(settings.metric)
      if value is not None and math.isfinite(value):
        return float(value)
    return None
  per_task = []
  for i, task in enumerate(plan.task_names):
    mean = last_episodes_mean(windows, task, settings.last_episodes)
    if mean is None:
      return None  # a task without an episode in the interval: no comparable score
    scale = reward_scales[i] if i < len(reward_scales) and reward_scales[i] else 1.0
    if settings.score_kind == 'human-normalised':
      per_task.append(atari.human_normalised(plan.task_games[i], mean))
    elif settings.score_kind == 'per-task normalised':
      per_task.append(mean / scale)
    else:
      per_task.append(mean)
  return float(np.mean(per_task))


def last_episodes_mean(windows: Sequence[Dict], task: str, n: int) -> Optional[float]:
  """Mean return of `task`'s last `n` episodes from log rows holding, per
  window, `episode_return/<task>` (the mean) and `episodes/<task>` (how
  many); None when there is none."""
  total, count = 0.0, 0
  for row in reversed(windows):
    k = int(row.get(f'episodes/{task}', 0))
    if k <= 0 or f'episode_return/{task}' not in row:
      continue
    used = min(k, n - count)
    total += used * float(row[f'episode_return/{task}'])
    count += used
    if count >= n:
      break
  return total / count if count else None
