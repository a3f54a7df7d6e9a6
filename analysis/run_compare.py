"""Runs compared at fixed agent steps per task; `launch/compare_runs.py` prints them.

Agent steps per task are a run's env steps over its tasks (the actors step
every task's envs equally); `step` and `window` arguments are in those units.
"""

from typing import Dict, List, Optional, Sequence

import numpy as np

from analysis.run_metrics import Run


def _per_task(run: Run, record: Dict) -> float:
  return record['env_steps'] / max(1, len(run.task_names))


def return_at(run: Run, task: str, step: float, window: float) -> Optional[float]:
  """A task's mean return over the games that ended in (step - window, step], each log row weighted
  by its games; None when the run has not reached `step` or no game ended in the window."""
  key, count = f'episode_return/{task}', f'episodes/{task}'
  if not run.records or _per_task(run, run.records[-1]) < step:
    return None
  rows = [(r[key], r[count]) for r in run.records
          if key in r and step - window < _per_task(run, r) <= step]
  games = sum(n for _, n in rows)
  return sum(v * n for v, n in rows) / games if games else None


def first_passing(run: Run, task: str, threshold: float, window: float) -> Optional[float]:
  """The first logged agent step per task at which `return_at` over the
  preceding `window` is at least `threshold`; None if never."""
  key = f'episode_return/{task}'
  for r in run.records:
    if key not in r:
      continue
    value = return_at(Run(run.name, [x for x in run.records if x['env_steps'] <= r['env_steps']],
                          run.config), task, _per_task(run, r), window)
    if value is not None and value >= threshold:
      return _per_task(run, r)
  return None


def median_until(run: Run, key: str, step: float) -> Optional[float]:
  """The median of metric `key` over the rows up to `step` that have it; None when none do."""
  values = [r[key] for r in run.records if key in r and _per_task(run, r) <= step]
  return float(np.median(values)) if values else None


HEADER_AFTER_RETURNS = ('passes {threshold} at', 'policy / value share of the torso gradient',
                        'kl_update', 'agent steps/s')


def table_rows(runs: Sequence[Run], labels: Sequence[str], steps: Sequence[float],
               window: float, thresholds: Dict[str, float]) -> List[List[str]]:
  """The comparison table's rows, one per run and task, as text cells.

  Returns:
    Rows [label, task, the return at each of `steps`, the first step passing the task's threshold
    ('<x>M', 'not passed', '-' without one), then the medians up to the last of `steps` of the torso
    gradient's 'policy / value' shares, kl_update and sps]; '-' where a value is missing.
  """
  rows = []
  last = max(steps)
  for run, label in zip(runs, labels):
    for task in run.task_names:
      returns = [return_at(run, task, s, window) for s in steps]
      passing = ('-' if task not in thresholds else
                 _steps(first_passing(run, task, thresholds[task], window), 'not passed'))
      policy = median_until(run, f'grad_share_policy/{task}', last)
      value = median_until(run, f'grad_share_baseline/{task}', last)
      share = '-' if policy is None else f'{policy:.2f} / {value:.2f}'
      kl, sps = median_until(run, 'kl_update', last), median_until(run, 'sps', last)
      rows.append([label, task, *[_number(x) for x in returns], passing, share,
                   '-' if kl is None else f'{kl:.2g}', '-' if sps is None else f'{sps:,.0f}'])
  return rows


def _number(x: Optional[float]) -> str:
  if x is None:
    return '-'
  return f'{x:,.0f}' if abs(x) >= 100 else f'{x:.1f}'


def _steps(x: Optional[float], missing: str) -> str:
  return missing if x is None else f'{x / 1e6:.2f}M'
