"""Training curves of NLE's own agent beside ours, on one axis of agent steps
or of wall-clock time.

NLE 1.3.0's `nle.agent.agent` writes one row per learner step to
`<savedir>/latest/logs.tsv` (`# Step`, `mean_episode_return`: the mean of the
games that ended in that step's batch, `nan` when none did) and, on its
standard output, a line every 5 seconds such as

  [INFO:14691 agent:571 2026-11-26 12:22:49,452] Steps 9600 @ 127.9 SPS. ...

which is the only record of when each step was reached. `peer_curve` joins
the two: every row with a return, at its agent step, and the time at that
step interpolated from the log lines. Ours come from `metrics.jsonl` (a row
every `log.every_seconds`: the mean return of the games that ended since the
previous row and how many there were).

`binned` averages either over bins of agent steps or seconds, weighting each
row by its games, with the standard error of that weighted mean computed
over rows (a cluster-robust estimate: rows, not games, are the samples,
since only their means are logged).
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
  """When NLE's agent reached each agent step, from its standard output.

  A step repeated by later lines (the learner waiting) counts at its first
  line.

  Args:
    lines: the agent's output lines; only its 'Steps N @' lines count.

  Returns:
    (agent steps, seconds since the first such line), float64 arrays, steps
    strictly increasing.

  Raises:
    ValueError: when there are no such lines, or the steps go back (logs of
      several runs).
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
  # A line repeats the last step while the learner waits: the step was
  # reached at its first line.
  first = np.concatenate([[True], steps[1:] != steps[:-1]])
  return steps[first], seconds[first]


def peer_curve(logs_tsv: str, log_path: str) -> Curve:
  """NLE's agent's curve from its logs.tsv and its standard output.

  Rows whose return is not finite, and rows cut short, are left out; each
  row's time is interpolated from the log lines (steps past the last line
  keep its time).

  Args:
    logs_tsv: the agent's logs.tsv.
    log_path: a file holding the agent's standard output.

  Returns:
    A Curve, one game per row.

  Raises:
    ValueError: as log_times, or when logs.tsv lacks the 'Step' or
      'mean_episode_return' column.
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
  """Our run's curve for one task from its metrics.jsonl rows.

  Rows are kept where games of the task ended ('episodes/<task>'). `time`
  restarts at 0 in each process of a resumed run; it is made to keep going.

  Args:
    records: the metrics rows, in file order.
    task: the task name.

  Returns:
    A Curve: env_steps, time, 'episode_return/<task>' and
    'episodes/<task>' of those rows.

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
  """The mean of rows' means weighted by their games, and its standard error.

  Args:
    returns: each row's mean return, [n].
    games: each row's games (the weights w), [n].

  Returns:
    (mean, standard error) as floats: the error is the cluster-robust one,
    sqrt(sum w^2 (x - mean)^2) / sum w, scaled by sqrt(n / (n - 1)) (nan
    when n < 2).
  """
  w, x = np.asarray(games, np.float64), np.asarray(returns, np.float64)
  mean = float(np.sum(w * x) / np.sum(w))
  n = len(x)
  if n < 2:
    return mean, float('nan')
  se = math.sqrt(float(np.sum(w ** 2 * (x - mean) ** 2)) * n / (n - 1)) / float(np.sum(w))
  return mean, se


def binned(curve: Curve, width: float, axis: str = 'steps',
           end: Optional[float] = None) -> List[Bin]:
  """The curve averaged over bins of agent steps or seconds.

  Args:
    curve: the Curve.
    width: the bins' width.
    axis: 'steps' or 'seconds'.
    end: where the last bin ends (it includes `end`); None: the last row.

  Returns:
    A Bin for each [k width, (k + 1) width) that holds rows (weighted_mean);
    empty bins are left out.
  """
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
  """The weighted mean return over the last window of agent steps.

  Args:
    curve: the Curve.
    width: the window's width in agent steps.
    end: the window's end (included).

  Returns:
    (mean, standard error, games) of the rows in (end - width, end]
    (weighted_mean); (nan, nan, 0) when there are none.
  """
  inside = (curve.steps > end - width) & (curve.steps <= end)
  if not inside.any():
    return float('nan'), float('nan'), 0
  mean, se = weighted_mean(curve.returns[inside], curve.games[inside])
  return mean, se, int(curve.games[inside].sum())
