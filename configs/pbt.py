"""Population-based training's settings (the `pbt` group) and pure parts: members' starts, perturbed
values kept in range, the score members are ranked by. launch/pbt.py runs it on Ray Tune.

The 'auto' score: per task, the mean return of its last `last_episodes` episodes in the interval
just trained; with one task that mean ('return'); with several Atari tasks, the mean
human-normalised score ('human-normalised'); otherwise the mean of each task's return divided by its
reward scale ('per-task normalised': a scaled-up task must not decide the ranking alone).
"""

import dataclasses
import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from infra import settings as settings_lib
from infra.settings import SettingsError as ConfigError
from infra.settings import mapping, setting, text
from rl import optimizers

STARTS = ('spread', 'random')


def _population_problem(value):
  if isinstance(value, bool) or not isinstance(value, int) or value < 2:
    return f'{value!r}: a population needs at least 2 members'
  return None


def _adapt_problem(adapt):
  if isinstance(adapt, str) or not isinstance(adapt, (tuple, list)) or not adapt:
    return 'empty; name at least one of ' + ', '.join(optimizers.HYPERPARAMETERS)
  for i, name in enumerate(adapt):
    if name not in optimizers.HYPERPARAMETERS:
      return f'unknown hyperparameter {name!r}; choose from ' + ', '.join(optimizers.HYPERPARAMETERS)
    if name in adapt[:i]:
      return f'{name!r} is named twice'
  return None


def _range_problem(bounds) -> Optional[str]:
  bounds = tuple(bounds) if isinstance(bounds, (tuple, list)) else (bounds,)
  if (len(bounds) != 2 or not all(isinstance(b, (int, float)) and not isinstance(b, bool)
                                  and math.isfinite(b) for b in bounds)):
    return f'{bounds!r}: give two finite numbers (low, high)'
  low, high = float(bounds[0]), float(bounds[1])
  if not 0 < low < high:
    return (f'({low:g}, {high:g}) is an empty range; give 0 < low < high (values are spread '
            'and perturbed on a log scale)')
  return None


def _phrase(ok: Callable[[object], bool], text: str):
  """A check that says `{value!r}; {text}` when `ok(value)` fails."""
  def check(value):
    return None if ok(value) else f'{value!r}; {text}'
  return check


def _number(v) -> bool:
  return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclasses.dataclass(frozen=True)
class PBTConfig:
  """Population-based training (the config's `pbt` group; launch/pbt.py, Jaderberg et al. 2017):
  members train side by side; every interval the worst quantile copies a better member's checkpoint
  and perturbs its hyperparameters. Unused by launch/train.py."""
  population: int = setting(4, 'members (launch/pbt.py --population overrides)',
                            _population_problem)
  adapt: Tuple[str, ...] = setting(
      ('learning_rate', 'entropy_cost'), 'hyperparameters to adapt: learning_rate, entropy_cost, '
      "max_grad_norm, eps (the optimizer's epsilon)", _adapt_problem)
  ranges: dict = setting(
      {'learning_rate': (1e-5, 1e-2), 'entropy_cost': (1e-4, 1e-1),
       'max_grad_norm': (0.1, 100.0), 'eps': (1e-8, 1e-1)},
      '(low, high) of each adapted one: members start spread over it, perturbations stay in it',
      mapping)
  start: str = setting(
      'spread', "'spread': each member's start log-evenly over the range (shuffled per "
      "hyperparameter); 'random': log-uniform draws",
      _phrase(lambda v: v in STARTS, f'choose one of {", ".join(STARTS)}'))
  interval_env_steps: int = setting(
      0, 'env steps (per member) between exploit/explore steps; 0 = total_env_steps / 10',
      _phrase(lambda v: isinstance(v, int) and not isinstance(v, bool),
              'give env steps as an integer (0 for a tenth of total_env_steps)'))
  metric: str = setting(
      'auto', "what members are ranked by: 'auto' (configs/pbt.py: mean return of the last "
      "episodes, per task averaged) or a metric the run logs, e.g. 'episode_return/Pong'", text)
  last_episodes: int = setting(
      100, "'auto': the last this many episodes of each task in the interval",
      _phrase(lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
              'give a positive integer'))
  quantile: float = setting(0.25, 'the bottom quantile copies the top one',
                            _phrase(lambda v: _number(v) and 0 < v <= 0.5,
                                    'give a fraction in (0, 0.5]'))
  resample_probability: float = setting(
      0.25, 'explore: draw a new value from the range with this probability, else multiply by '
      'a perturb factor', _phrase(lambda v: _number(v) and 0 <= v <= 1,
                                  'give a probability in [0, 1]'))
  perturb_factors: Tuple[float, ...] = setting(
      (0.8, 1.2), "explore's multipliers (PBT paper)",
      _phrase(lambda v: isinstance(v, (tuple, list)) and bool(v)
              and all(_number(f) and f > 0 for f in v), 'give positive multipliers'))
  cpus_per_member: float = setting(
      1.0, 'CPUs Ray reserves per member: members at once = CPUs / this',
      _phrase(lambda v: _number(v) and v > 0, 'give a positive number'))

  def problem(self):
    """Each adapted hyperparameter needs its range."""
    for name in self.adapt:
      if name not in self.ranges:
        return f'ranges.{name}', 'missing: give (low, high)'
      why = _range_problem(self.ranges[name])
      if why is not None:
        return f'ranges.{name}', why
    return None


@dataclasses.dataclass(frozen=True)
class Settings:
  """The `pbt` group checked against a run, as `check` gives it."""
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
  """The metric keys a run logs that can rank members (pbt.metric's choices):
  'mean_episode_return', per task 'episode_return/<task>' (and 'hns/<task>'
  for an Atari game with references), then 'hns/median' and 'hns/mean'."""
  keys = ['mean_episode_return']
  for i, task in enumerate(plan.task_names):
    keys.append(f'episode_return/{task}')
    if plan.normalised_score(i, 0.0) is not None:
      keys.append(f'hns/{task}')
  if len(plan.task_names) > 1 and _all_normalised(plan):
    keys += ['hns/median', 'hns/mean']
  return keys


def _all_normalised(plan) -> bool:
  """Whether every task's family has a shared score scale (Atari's
  human-normalised score for every game)."""
  return all(plan.normalised_score(i, 0.0) is not None for i in range(plan.num_tasks))


def score_kind(plan) -> str:
  """The kind of the run's 'auto' score (the module docstring)."""
  if len(plan.task_names) == 1:
    return 'return'
  if _all_normalised(plan):
    return 'human-normalised'
  return 'per-task normalised'


def check(config, plan, population: Optional[int] = None) -> Settings:
  """The config's PBT settings for `population` members (None: pbt.population), checked against the
  run's RunPlan.

  Raises:
    ConfigError: naming the field: a value its check refuses, a population below 2, an interval not
      below total_env_steps or shorter than one update, a metric the run does not log, or a quantile
      of no member.
  """
  p = settings_lib.read(PBTConfig, config.pbt, 'pbt')
  population = p.population if population is None else population
  why = _population_problem(population)
  if why is not None:
    raise ConfigError('pbt.population', why)
  adapt = tuple(p.adapt)
  fields = {v: k for k, v in optimizers.config_fields(config.optimizer.name).items()}
  ranges = {name: (float(p.ranges[name][0]), float(p.ranges[name][1])) for name in adapt}
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
  if math.ceil(p.quantile * population) < 1 or population * p.quantile < 0.5:
    raise ConfigError('pbt.quantile', f'{p.quantile} of {population} members is no member; '
                      'raise it or the population')
  factors = tuple(float(f) for f in p.perturb_factors)
  return Settings(population=population, ranges=ranges,
                  fields={name: fields[name] for name in adapt}, interval=interval,
                  metric=p.metric, score_kind=score_kind(plan), last_episodes=p.last_episodes,
                  quantile=float(p.quantile), resample_probability=float(p.resample_probability),
                  perturb_factors=factors, cpus_per_member=float(p.cpus_per_member),
                  start=p.start)


def starts(settings: Settings, seed: int) -> List[Dict[str, float]]:
  """Each member's starting hyperparameters (adapted hyperparameter -> value), the same for the same
  seed. 'spread': for every hyperparameter the n members get n values log-evenly spaced over its
  range, shuffled per hyperparameter so that members differ in all of them at once. 'random':
  log-uniform draws."""
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
  out = dict(values)
  for name, (low, high) in settings.ranges.items():
    if name in out:
      out[name] = float(min(max(out[name], low), high))
  return out


def apply(config, values: Dict[str, float]) -> None:
  """Sets the hyperparameters' config fields (optimizers.config_fields), in place; KeyError for
  one the config's optimizer has not."""
  fields = {v: k for k, v in optimizers.config_fields(config.optimizer.name).items()}
  for name, value in values.items():
    section, _, field = fields[name].rpartition('.')
    (config[section] if section else config)[field] = float(value)


def score(windows: Sequence[Dict], plan, settings: Settings,
          reward_scales: Sequence[float]) -> Optional[float]:
  """A member's score (higher is better) from the log rows of the interval it just trained: 'auto'
  as the module docstring says; another metric's newest finite logged value. None when a task
  finished no episode in the interval ('auto') or the metric has no finite value in it.

  Args:
    windows: the interval's log rows (metrics.jsonl), oldest first.
    reward_scales: the config's, dividing the tasks' means for 'per-task normalised' (missing or 0:
      1).
  """
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
      per_task.append(plan.normalised_score(i, mean))
    elif settings.score_kind == 'per-task normalised':
      per_task.append(mean / scale)
    else:
      per_task.append(mean)
  return float(np.mean(per_task))


def last_episodes_mean(windows: Sequence[Dict], task: str, n: int) -> Optional[float]:
  """The mean return of a task's last `n` episodes in log rows (oldest first), or None when none has
  one. Each row holds a window's mean (`episode_return/<task>`) and count (`episodes/<task>`); the
  oldest row used counts only the episodes still needed, as if all its returns were its mean."""
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
