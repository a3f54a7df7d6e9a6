"""A markdown table of finished runs, one row per run and task (HEADER's columns).
`launch/run_table.py` is the command line and says what each column holds."""

import glob
import json
import os
import re
from typing import Dict, List, Optional

from analysis import run_metrics
from analysis import run_plots

HEADER = ('run', 'task', 'agent steps per task', 'wall time', 'agent steps/s',
          'evaluation (+- s.e.)', 'training return, end', 'PopArt mu / sigma')


def latest_evaluation(workdir: str) -> Optional[Dict]:
  """The record of <workdir>/eval/<step>[.<n>].json with the highest step (of
  several evaluations of a step, the highest n), or None without one."""
  best = None
  for path in glob.glob(os.path.join(workdir, 'eval', '*.json')):
    m = re.fullmatch(r'(\d+)(?:\.(\d+))?\.json', os.path.basename(path))
    if m:
      key = (int(m.group(1)), int(m.group(2) or 1))
      if best is None or key > best[0]:
        best = (key, path)
  if best is None:
    return None
  with open(best[1]) as f:
    return json.load(f)


def _num(value: float) -> str:
  if abs(value) >= 100:
    return f'{value:,.0f}'
  return f'{value:.1f}' if abs(value) >= 1 else f'{value:.2g}'


def score(entry: Dict) -> str:
  """'mean +- s.e. (n)' of an evaluation's task entry (no '+- s.e.' without one)."""
  r = entry['return']
  sem = '' if r.get('sem') is None else f' +- {_num(r["sem"])}'
  return f'{_num(r["mean"])}{sem} ({entry["episodes"]})'


def run_rows(workdir: str, label: str, window: int) -> List[List[str]]:
  """The table's rows of one run folder (or its archive), one per task, as text cells of HEADER's
  columns, '-' where a value is missing; an evaluation older than the last row names its env step.

  Args:
    window: the training return's window, in agent steps per task (run_plots.smoothed_returns).

  Raises:
    ValueError: when the run has no metrics rows yet.
    FileNotFoundError: without a metrics file.
  """
  run = run_metrics.load_metrics(workdir, label)
  if not run.records:
    raise ValueError(f'{workdir} has no metrics rows yet')
  per_task = run_plots.per_task_steps(run)
  tasks = run.task_names
  last = run.records[-1]
  steps, wall = last['env_steps'], last.get('time')
  evaluation = latest_evaluation(workdir)
  # Runs without PopArt log the unused statistics (mu 0, sigma 1): not shown.
  popart = run.config.get('popart', {}).get('enabled', True)
  rows = []
  for task in tasks:
    x, y = run_plots.smoothed_returns(per_task, task, window)
    mu, sigma = run.series(f'popart/mu/{task}')[1], run.series(f'popart/sigma/{task}')[1]
    entry = (evaluation or {}).get('tasks', {}).get(task)
    rows.append([
        label, task, f'{steps / max(1, len(tasks)) / 1e6:.2f}M',
        '-' if wall is None else f'{wall / 60:.0f} min',
        '-' if not wall else f'{steps / wall:,.0f}',
        '-' if entry is None else score(entry) + (
            '' if evaluation['env_steps'] >= steps else
            f' at env step {evaluation["env_steps"]:,}'),
        _num(y[-1]) if len(y) else '-',
        f'{_num(mu[-1])} / {_num(sigma[-1])}' if popart and len(mu) else '-'])
  return rows


def uniform_rows(path: str) -> List[List[str]]:
  """Rows 'uniform play' of an evaluation record's tasks, '-' but the score;
  ValueError naming `path` when it cannot be read or has no 'tasks'."""
  try:
    with open(path) as f:
      record = json.load(f)
  except (OSError, ValueError) as e:
    raise ValueError(f'cannot read {path} ({getattr(e, "strerror", None) or e})') from None
  if not isinstance(record, dict) or not isinstance(record.get('tasks'), dict):
    raise ValueError(f'{path} is not an evaluation record (launch/evaluate.py): no tasks')
  return [['uniform play', task, '-', '-', '-', score(entry), '-', '-']
          for task, entry in record['tasks'].items()]


def markdown(rows: List[List[str]]) -> str:
  lines = ['| ' + ' | '.join(HEADER) + ' |', '|' + ' --- |' * len(HEADER)]
  lines += ['| ' + ' | '.join(row) + ' |' for row in rows]
  return '\n'.join(lines)
