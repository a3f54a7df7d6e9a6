"""A run's logged metrics for analysis: metrics.jsonl (and wandb when online) as per-key series, and
the small plots the notebooks draw (analysis/run_loading.py restores a run's checkpoint instead)."""

import glob
import math
import os
from typing import Dict, List, Optional, Sequence

import numpy as np

from rundir import run_folder


class Run:
  """One run's metrics rows, in order (stitch_resumed for a run folder), and
  its config as a dict (None: {})."""

  def __init__(self, name: str, records: List[Dict], config: Optional[Dict] = None):
    self.name, self.records, self.config = name, records, config or {}

  @property
  def keys(self) -> List[str]:
    return sorted({k for r in self.records for k in r})

  @property
  def task_names(self) -> List[str]:
    """The config's task names; without them, those of 'popart/mu/<task>' keys, sorted."""
    return [t['name'] for t in self.config.get('tasks', [])] or sorted(
        {k.split('/', 1)[1] for k in self.keys if k.startswith('popart/mu/')})

  def series(self, key: str):
    """(env_steps, values), float arrays of the rows where `key` is a finite number."""
    rows = [(r['env_steps'], r[key]) for r in self.records
            if key in r and isinstance(r[key], (int, float)) and math.isfinite(r[key])]
    if not rows:
      return np.zeros(0), np.zeros(0)
    x, y = zip(*rows)
    return np.asarray(x, float), np.asarray(y, float)

  def last(self, prefix: str) -> Dict[str, float]:
    """Each key under `prefix` (e.g. 'actions/<task>/'), prefix removed -> its
    value in the last row that has it."""
    out = {}
    for r in self.records:
      out.update({k[len(prefix):]: v for k, v in r.items() if k.startswith(prefix)})
    return out


def stitch_resumed(records: List[Dict]) -> List[Dict]:
  """One history from a metrics.jsonl that resumed runs appended to.

  A resumed run logs its checkpoint's env steps again, so the stopped process's rows past the
  resumed process's first row are dropped; a process whose predecessor's extra rows were set aside
  (run_folder.set_aside_metrics) shows only by `time` going back. `time` then goes on from the last
  kept row's (training time of the kept history), the process's own clock kept as `process_time`.
  Rows without env_steps count as env step 0.

  Returns:
    The kept rows in order; rows with a shifted `time` are new dicts.
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
  """A Run of a run folder (or its rundir/archive.py archive):
  stitch_resumed(metrics.jsonl[.gz] rows) and config.json (None without one),
  named `name` or the folder's name.

  Raises:
    FileNotFoundError: without a metrics file.
    ValueError: naming a line that is not a JSON row.
    rundir.run_folder.RunFolderError: when config.json cannot be read.
  """
  records = stitch_resumed(run_folder.read_metrics(workdir))
  return Run(name or os.path.basename(os.path.normpath(workdir)), records,
             run_folder.read_config(workdir))


def load_all_metrics(workdirs: Sequence[str]) -> List[Run]:
  """One Run per folder (load_metrics), in the order given, each glob
  pattern's matches sorted (a pattern matching nothing is read as a path)."""
  paths = [p for w in workdirs for p in (sorted(glob.glob(w)) or [w])]
  return [load_metrics(p) for p in paths]


def load_wandb_runs(paths: Sequence[str]) -> List[Run]:
  """One Run per wandb path 'entity/project/run_id', its rows from the run's
  history (env_steps from '_step' where a row lacks it); needs `wandb login`."""
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
  """Plots `metric` (per_task: `<metric>/<task>` for each task) over env steps,
  one line per run and task, on `ax` (None: the current axes); returns it."""
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
  """Bars of a task's action frequencies in the run's last log window on `ax`
  (None: the current axes); returns it."""
  import matplotlib.pyplot as plt
  ax = ax or plt.gca()
  freqs = run.last(f'actions/{task}/')
  ax.bar(range(len(freqs)), list(freqs.values()))
  ax.set_xticks(range(len(freqs)), list(freqs), rotation=90, fontsize=6)
  ax.set_title(f'{run.name}: {task} actions (last window)')
  ax.set_ylim(0, 1)
  return ax
