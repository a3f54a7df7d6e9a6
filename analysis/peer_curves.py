"""Training curves of NLE's own agent beside ours, on one axis of agent steps or of wall-clock time.

NLE's agent logs each learner step's mean return to logs.tsv, and only its standard output
('Steps N @' every 5 s) says when a step was reached; `peer_curve` joins the two. Ours come from
metrics.jsonl. `binned` weights each row by its games, with a cluster-robust standard error (rows,
not games, are the samples, since only their means are logged).
"""

import csv
import datetime
import math
import re
from typing import List, NamedTuple, Optional, Sequence

import numpy as np

_LOG_LINE = re.compile(r'^\[INFO:\d+ \S+ (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+)\] Steps (\d+) @ ')


class Curve(NamedTuple):
  """One row per logged batch of finished games."""
  steps: np.ndarray    # agent steps at the row
  seconds: np.ndarray  # wall-clock seconds since the run's first log line
  returns: np.ndarray  # mean return of the games in the row
  games: np.ndarray    # how many games the row averages (NLE's agent: 1 per row, not logged)


def log_times(lines: Sequence[str]):
  """(agent steps, seconds since the first line), float64, steps strictly
  increasing, from the 'Steps N @' lines of NLE's agent's standard output.

  Raises:
    ValueError: when there are no such lines, or the steps go back (logs of several runs).
  """
  points = []
  for line in lines:
    m = _LOG_LINE.match(line)
    if m:
      when = datetime.datetime.strptime(m.group(1), '%Y-%m-%d %H:%M:%S,%f')
      points.append((when, int(m.group(2))))
  if not points:
    raise ValueError("no 'Steps N @' lines: not the output of python -m nle.agent.agent")
  for (_, before), (when, after) in zip(points, points[1:]):
    if after < before:
      raise ValueError(f'the agent\'s steps go back from {before:,} to {after:,} at {when}: '
                       'logs of several runs? Give the output of one')
  t0 = points[0][0]
  steps = np.array([s for _, s in points], np.float64)
  seconds = np.array([(t - t0).total_seconds() for t, _ in points], np.float64)
  # A line repeats the last step while the learner waits: the step was reached at its first line.
  first = np.concatenate([[True], steps[1:] != steps[:-1]])
  return steps[first], seconds[first]


def peer_curve(logs_tsv: str, log_path: str) -> Curve:
  """NLE's agent's Curve (one game per row) from its logs.tsv and standard
  output; rows with a non-finite return or cut short are left out.

  Raises:
    ValueError: as log_times, or when logs.tsv lacks the 'Step' or 'mean_episode_return' column.
  """
  with open(log_path, errors='replace') as f:
    log_steps, log_seconds = log_times(f.read().splitlines())
  steps, returns = [], []
  with open(logs_tsv, newline='') as f:
    reader = csv.reader(f, delimiter='\t')
    header = next(reader)
    header[0] = header[0].lstrip('# ').strip()
    step_col, return_col = header.index('Step'), header.index('mean_episode_return')
    for row in reader:
      if len(row) <= max(step_col, return_col):  # cut off: the agent still writing, or killed
        continue
      value = float(row[return_col])
      if math.isfinite(value):
        steps.append(float(row[step_col]))
        returns.append(value)
  steps = np.array(steps, np.float64)
  # Time at each step: the log lines interpolated (steps past the last line keep its time).
  seconds = np.interp(steps, log_steps, log_seconds)
  return Curve(steps, seconds, np.array(returns, np.float64), np.ones(len(steps)))


def our_curve(records: Sequence[dict], task: str) -> Curve:
  """Our run's Curve for one task from its metrics.jsonl rows, in file order, where games of the
  task ended: env_steps, time, 'episode_return/<task>' and 'episodes/<task>'.

  Raises:
    ValueError: when no game of the task ended.
  """
  # `time` restarts at 0 in each process of a resumed run: made to keep going.
  times, offset, last = [], 0.0, 0.0
  for r in records:
    if r['time'] + offset < last:
      offset = last - r['time']
    last = r['time'] + offset
    times.append(last)
  keep = [i for i, r in enumerate(records) if r.get(f'episodes/{task}')]
  if not keep:
    raise ValueError(f'no finished games of task {task!r} in the metrics')
  rows = [records[i] for i in keep]
  return Curve(np.array([r['env_steps'] for r in rows], np.float64),
               np.array([times[i] for i in keep], np.float64),
               np.array([r[f'episode_return/{task}'] for r in rows], np.float64),
               np.array([r[f'episodes/{task}'] for r in rows], np.float64))


class Bin(NamedTuple):
  """One bin of `binned`: its range on the axis, weighted mean, its error and games."""
  lo: float
  hi: float
  mean: float
  se: float      # nan with fewer than two rows
  games: int


def weighted_mean(returns: np.ndarray, games: np.ndarray):
  """(mean, standard error) of rows' mean returns weighted by their games w: the cluster-robust
  error sqrt(sum w^2 (x - mean)^2) / sum w, times sqrt(n / (n - 1)); nan when n < 2."""
  w, x = np.asarray(games, np.float64), np.asarray(returns, np.float64)
  mean = float(np.sum(w * x) / np.sum(w))
  n = len(x)
  if n < 2:
    return mean, float('nan')
  se = math.sqrt(float(np.sum(w ** 2 * (x - mean) ** 2)) * n / (n - 1)) / float(np.sum(w))
  return mean, se


def binned(curve: Curve, width: float, axis: str = 'steps',
           end: Optional[float] = None) -> List[Bin]:
  """A Bin (weighted_mean) for each [k width, (k + 1) width) of `axis` ('steps' or 'seconds') that
  holds rows; the last bin ends at and includes `end` (None: the last row)."""
  x = curve.steps if axis == 'steps' else curve.seconds
  end = float(x.max()) if end is None else end
  out = []
  for k in range(int(math.ceil(end / width))):
    lo, hi = k * width, min((k + 1) * width, end)
    inside = (x >= lo) & ((x < hi) if hi < end else (x <= hi))
    if inside.any():
      mean, se = weighted_mean(curve.returns[inside], curve.games[inside])
      out.append(Bin(lo, hi, mean, se, int(curve.games[inside].sum())))
  return out


def last_window(curve: Curve, width: float, end: float):
  """(mean, standard error, games) of the rows in (end - width, end] of agent
  steps (weighted_mean); (nan, nan, 0) when there are none."""
  inside = (curve.steps > end - width) & (curve.steps <= end)
  if not inside.any():
    return float('nan'), float('nan'), 0
  mean, se = weighted_mean(curve.returns[inside], curve.games[inside])
  return mean, se, int(curve.games[inside].sum())
