"""A markdown table of finished runs, one row per run and task: budget,
wall time, speed, the latest evaluation (mean +- standard error), the
training return at the end, and PopArt's final statistics.

  python launch/run_table.py runs/pc_popart runs/pc_unclipped runs/pc_clipped \\
      --labels='a. PopArt,b. unclipped,c. clipped' --uniform=runs/pc_popart/eval/3000000_uniform.json

Columns: agent steps per task (the run's env steps over its tasks), wall
time (training only: `time` of the last metrics row, resumed runs stitched),
agent steps/s over the whole run (env steps / wall time), the evaluation of
the newest evaluated step (`launch/evaluate.py`; eval/<step>.json, not the
uniform one; its env step is named when it is not the run's last), the training return averaged over the games that ended in the
last --window agent steps per task, and PopArt's mu and sigma at the end
(`-` for a run whose config has PopArt off). --uniform adds a row per task from a uniform-play
evaluation. Reads metrics.jsonl or an archived metrics.jsonl.gz
(analysis/run_metrics.load_metrics) and the eval/ folder beside it.
"""

import glob
import json
import os
import re
import sys
from typing import Dict, List, Optional

from absl import app
from absl import flags

from analysis import run_metrics
from launch import plot_runs

_LABELS = _UNIFORM = _WINDOW = None


def _define_flags():
  """The script's flags, defined only when it runs as a script: tests import
  this module beside other launch/ modules with flags of the same names."""
  global _LABELS, _UNIFORM, _WINDOW
  _LABELS = flags.DEFINE_list('labels', None, 'One label per run (default: folder names).')
  _UNIFORM = flags.DEFINE_string('uniform', None, 'A uniform-play evaluation JSON '
                                 '(eval/<step>_uniform.json) to add as rows.')
  _WINDOW = flags.DEFINE_integer('window', 100_000, 'Agent steps per task of the training '
                                 'return at the end.', lower_bound=1)

HEADER = ('run', 'task', 'agent steps per task', 'wall time', 'agent steps/s',
          'evaluation (+- s.e.)', 'training return, end', 'PopArt mu / sigma')


def latest_evaluation(workdir: str) -> Optional[Dict]:
  """The record of the highest evaluated step in <workdir>/eval (the policy's,
  not uniform play's; of several evaluations of a step, the newest), or None."""
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
  """'mean +- s.e. (n)' of an evaluation's task entry."""
  r = entry['return']
  sem = '' if r.get('sem') is None else f' +- {_num(r["sem"])}'
  return f'{_num(r["mean"])}{sem} ({entry["episodes"]})'


def run_rows(workdir: str, label: str, window: int) -> List[List[str]]:
  run = run_metrics.load_metrics(workdir, label)
  if not run.records:
    raise ValueError(f'{workdir} has no metrics rows yet')
  per_task = plot_runs.per_task_steps(run)
  tasks = run.task_names
  last = run.records[-1]
  steps, wall = last['env_steps'], last.get('time')
  evaluation = latest_evaluation(workdir)
  # Runs without PopArt log the unused statistics (mu 0, sigma 1): not shown.
  popart = run.config.get('popart', {}).get('enabled', True)
  rows = []
  for task in tasks:
    x, y = plot_runs.smoothed_returns(per_task, task, window)
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
  with open(path) as f:
    record = json.load(f)
  return [['uniform play', task, '-', '-', '-', score(entry), '-', '-']
          for task, entry in record['tasks'].items()]


def markdown(rows: List[List[str]]) -> str:
  lines = ['| ' + ' | '.join(HEADER) + ' |', '|' + ' --- |' * len(HEADER)]
  lines += ['| ' + ' | '.join(row) + ' |' for row in rows]
  return '\n'.join(lines)


def main(argv):
  workdirs = argv[1:]
  if not workdirs:
    raise app.UsageError('give one or more run folders')
  labels = _LABELS.value or [os.path.basename(os.path.normpath(w)) for w in workdirs]
  if len(labels) != len(workdirs):
    raise app.UsageError(f'--labels has {len(labels)} labels for {len(workdirs)} runs')
  try:
    rows = [row for w, label in zip(workdirs, labels) for row in run_rows(w, label, _WINDOW.value)]
  except (OSError, ValueError) as e:  # not a run folder, or not its metrics: one line
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)
  if _UNIFORM.value:
    rows += uniform_rows(_UNIFORM.value)
  print(markdown(rows))


if __name__ == '__main__':
  _define_flags()
  app.run(main)
