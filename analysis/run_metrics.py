"""A run's logged metrics for analysis: metrics.jsonl (and wandb when
online) as per-key series, and the small plots the notebooks draw.
(analysis/run_loading.py restores a run's checkpoint instead.)

  from analysis import run_metrics
  runs = run_metrics.load_all_metrics(['runs/single', 'runs/popart'])
  run_metrics.plot_metric(runs, 'episode_return')       # one line per run and task
"""

import glob
import math
import os
from typing import Dict, List, Optional, Sequence

import numpy as np

from rundir import run_folder


class Run:
  """One run's metrics: `series(key)` -> (env_steps, values) where logged.

  Args:
    name: the run's label.
    records: its metrics rows, in order (stitch_resumed for a run folder).
    config: its config as a dict (config.json); None: {}.
  """

  def __init__(self, name: str, records: List[Dict], config: Optional[Dict] = None):
    self.name, self.records, self.config = name, records, config or {}

  @property
  def keys(self) -> List[str]:
    """Every key logged in any row, sorted."""
    return sorted({k for r in self.records for k in r})

  @property
  def task_names(self) -> List[str]:
    """The config's task names; without them, the tasks of 'popart/mu/<task>' keys, sorted."""
    return [t['name'] for t in self.config.get('tasks', [])] or sorted(
        {k.split('/', 1)[1] for k in self.keys if k.startswith('popart/mu/')})

  def series(self, key: str):
    """One metric over training.

    Args:
      key: the metric's name in the rows.

    Returns:
      (env_steps, values), float arrays of the rows where `key` is a finite
      number; empty arrays when there are none.
    """
    rows = [(r['env_steps'], r[key]) for r in self.records
            if key in r and isinstance(r[key], (int, float)) and math.isfinite(r[key])]
    if not rows:
      return np.zeros(0), np.zeros(0)
    x, y = zip(*rows)
    return np.asarray(x, float), np.asarray(y, float)

  def last(self, prefix: str) -> Dict[str, float]:
    """The latest value of every key under a prefix.

    Args:
      prefix: e.g. 'actions/<task>/'.

    Returns:
      The key without the prefix -> its value in the last row that has it.
    """
    out = {}
    for r in self.records:
      out.update({k[len(prefix):]: v for k, v in r.items() if k.startswith(prefix)})
    return out


def stitch_resumed(records: List[Dict]) -> List[Dict]:
  """One history from a metrics.jsonl that resumed runs appended to.

  A run stopped and resumed from its last checkpoint logs that checkpoint's
  env steps again: the records the stopped process wrote past the resumed
  process's first record describe a stretch the resumed run does not
  continue, so they are dropped (those between the checkpoint and that first
  record, one log window at most, stay). `launch/train.py` itself sets those
  rows aside when it resumes (rundir/run_folder.set_aside_metrics), so its
  file shows the new process only by `time` (seconds since the process
  started) going back. Either way `time` goes on from the last kept record's,
  so it counts the training time of the kept history (the dropped stretch's
  wall time is not in it); the resumed records keep their process's own
  clock as `process_time`. Records without env_steps count as env step 0.

  Args:
    records: the rows of metrics.jsonl, in file order.

  Returns:
    The kept rows, in order; rows with a shifted `time` are new dicts, the
    others the same objects.
  """
  out: List[Dict] = []
  offset = 0.0
  for r in records:
    if out and 'env_steps' in r and r['env_steps'] < out[-1].get('env_steps', 0):
      out = [o for o in out if o.get('env_steps', 0) <= r['env_steps']]
      offset = out[-1].get('time', 0.0) if out else 0.0
    elif out and 'time' in r and r['time'] + offset < out[-1].get('time', 0.0):
      offset = out[-1]['time']  # a new process, its predecessor's extra rows set aside
    if offset and 'time' in r:
      r = {**r, 'process_time': r['time'], 'time': r['time'] + offset}
    out.append(r)
  return out


def load_metrics(workdir: str, name: Optional[str] = None) -> Run:
  """A run folder's metrics as one stitched history, with its config.json.

  Args:
    workdir: a run folder, or an archive of one (rundir/archive.py).
    name: the run's label; None: the folder's name.

  Returns:
    A Run of stitch_resumed(rows of metrics.jsonl or metrics.jsonl.gz) and
    the config (None where there is no config.json).

  Raises:
    FileNotFoundError: without a metrics file.
    ValueError: naming a line that is not a JSON row.
    rundir.run_folder.RunFolderError: when config.json cannot be read.
  """
  records = stitch_resumed(run_folder.read_metrics(workdir))
  return Run(name or os.path.basename(os.path.normpath(workdir)), records,
             run_folder.read_config(workdir))


def load_all_metrics(workdirs: Sequence[str]) -> List[Run]:
  """The metrics of several run folders.

  Args:
    workdirs: run folders or glob patterns (a pattern matching nothing is
      read as a path).

  Returns:
    One Run per folder (load_metrics), in the order given, each pattern's
    matches sorted.
  """
  paths = [p for w in workdirs for p in (sorted(glob.glob(w)) or [w])]
  return [load_metrics(p) for p in paths]


def load_wandb_runs(paths: Sequence[str]) -> List[Run]:
  """Runs from wandb; needs `wandb login` and network.

  Args:
    paths: wandb run paths, 'entity/project/run_id'.

  Returns:
    One Run per path, its rows from the run's history (env_steps from
    wandb's '_step' where a row lacks it) and its config.
  """
  if not paths:
    return []
  import wandb
  api = wandb.Api()
  out = []
  for path in paths:
    run = api.run(path)
    records = [dict(r, env_steps=r.get('env_steps', r.get('_step', 0)))
               for r in run.scan_history()]
    out.append(Run(run.name, records, dict(run.config)))
  return out


def plot_metric(runs: Sequence[Run], metric: str, ax=None, per_task: bool = True):
  """Plots a metric over env steps, one line per run (and task).

  Args:
    runs: the Runs.
    metric: e.g. 'episode_return', 'hns', 'popart/sigma', 'entropy'.
    ax: the matplotlib axes; None: the current ones.
    per_task: plot `<metric>/<task>` for each task; False: `metric` itself.

  Returns:
    The axes.
  """
  import matplotlib.pyplot as plt
  ax = ax or plt.gca()
  for run in runs:
    keys = ([f'{metric}/{t}' for t in run.task_names] if per_task else [metric])
    for key in keys:
      x, y = run.series(key)
      if len(x):
        label = run.name if not per_task else f'{run.name}: {key.rsplit("/", 1)[1]}'
        ax.plot(x, y, label=label)
  ax.set_xlabel('env steps')
  ax.set_ylabel(metric)
  ax.set_title(metric)
  if ax.get_legend_handles_labels()[0]:
    ax.legend(fontsize=7)
  return ax


def plot_actions(run: Run, task: str, ax=None):
  """Plots a task's action frequencies in the run's last log window, as bars.

  Args:
    run: the Run.
    task: the task name ('actions/<task>/<action>' keys).
    ax: the matplotlib axes; None: the current ones.

  Returns:
    The axes.
  """
  import matplotlib.pyplot as plt
  ax = ax or plt.gca()
  freqs = run.last(f'actions/{task}/')
  ax.bar(range(len(freqs)), list(freqs.values()))
  ax.set_xticks(range(len(freqs)), list(freqs), rotation=90, fontsize=6)
  ax.set_title(f'{run.name}: {task} actions (last window)')
  ax.set_ylim(0, 1)
  return ax
