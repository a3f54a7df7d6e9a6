"""Learning curves of runs, per task, into one PNG; and when each first
reached a return.

  python launch/plot_runs.py runs/pong_a2c runs/pong_a2c_1 --output=docs/pong_a2c.png \\
      --labels='a2c recipe,a2c recipe (nu from 0)' --random=-20.7 --threshold=-15.7

Returns are whole games, averaged over every game that ended in the last
--window env steps (each game weighted once, however the log windows cut
them). Panels: that smoothed return per task, the policy entropy, and
agent steps per second. --threshold prints, per run and task, the first env
step at which the smoothed return reached it.
"""

import os
import sys
from typing import List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import numpy as np  # noqa: E402

_OUTPUT = _LABELS = _WINDOW = _RANDOM = _THRESHOLD = _TITLE = None


def _define_flags():
  """The script's flags, defined only when it runs as a script: tests import
  this module beside other launch/ modules with flags of the same names."""
  global _OUTPUT, _LABELS, _WINDOW, _RANDOM, _THRESHOLD, _TITLE
  _OUTPUT = flags.DEFINE_string('output', 'curves.png', 'PNG to write.')
  _LABELS = flags.DEFINE_list('labels', [], 'One label per run folder (default: folder names).')
  _WINDOW = flags.DEFINE_integer('window', 100_000, 'Env steps the smoothed return averages over.')
  _RANDOM = flags.DEFINE_float('random', None, 'Random play\'s score: a dashed line.')
  _THRESHOLD = flags.DEFINE_float('threshold', None, 'A return to report first crossings of.')
  _TITLE = flags.DEFINE_string('title', '', 'Figure title.')


def smoothed_returns(run, task: str, window: int) -> Tuple[np.ndarray, np.ndarray]:
  """(env steps, mean return of the games that ended in the preceding
  `window` env steps), at every log step with at least one such game."""
  rows = [(r['env_steps'], r[f'episode_return/{task}'], r[f'episodes/{task}'])
          for r in run.records if f'episode_return/{task}' in r]
  if not rows:
    return np.zeros(0), np.zeros(0)
  steps, means, counts = (np.asarray(v, float) for v in zip(*rows))
  out = []
  for s in steps:
    inside = (steps > s - window) & (steps <= s)
    out.append(np.sum(means[inside] * counts[inside]) / np.sum(counts[inside]))
  return steps, np.asarray(out)


def first_crossing(steps: np.ndarray, values: np.ndarray, threshold: float) -> Optional[float]:
  above = np.flatnonzero(values >= threshold)
  return float(steps[above[0]]) if len(above) else None


def plot(runs, labels: List[str], output: str, window: int, random_score=None,
         threshold=None, title: str = ''):
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  tasks = sorted({t for run in runs for t in run.task_names})
  cols = min(3, len(tasks))
  rows = -(-len(tasks) // cols) + 1
  fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.2 * rows), squeeze=False)
  for i, task in enumerate(tasks):
    ax = axes[i // cols][i % cols]
    for run, label in zip(runs, labels):
      x, y = smoothed_returns(run, task, window)
      if len(x):
        ax.plot(x, y, label=label)
    if random_score is not None and len(tasks) == 1:
      ax.axhline(random_score, color='grey', ls='--', lw=1, label='random')
    if threshold is not None and len(tasks) == 1:
      ax.axhline(threshold, color='red', ls=':', lw=1, label=f'{threshold:g}')
    ax.set_title(f'{task}: return (games ending in the last {window // 1000}k steps)', fontsize=8)
    ax.set_xlabel('agent steps')
    ax.legend(fontsize=7)
  for ax in axes[-1]:
    ax.axis('off')
  for j, (key, name) in enumerate((('entropy', 'policy entropy'), ('sps', 'agent steps / s'))):
    if j >= cols:
      break
    ax = axes[-1][j]
    ax.axis('on')
    for run, label in zip(runs, labels):
      x, y = run.series(key)
      ax.plot(x, y, label=label, lw=0.8)
    ax.set_title(name, fontsize=8)
    ax.set_xlabel('agent steps')
    ax.legend(fontsize=7)
  if title:
    fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(output, dpi=90)
  return tasks


def main(argv):
  from launch import results
  workdirs = argv[1:]
  if not workdirs:
    raise app.UsageError('give one or more run folders')
  runs = results.load_runs(workdirs)
  labels = _LABELS.value or [r.name for r in runs]
  if len(labels) != len(runs):
    raise app.UsageError(f'{len(labels)} labels for {len(runs)} runs')
  tasks = plot(runs, labels, _OUTPUT.value, _WINDOW.value, _RANDOM.value, _THRESHOLD.value,
               _TITLE.value)
  print(f'wrote {_OUTPUT.value}')
  for run, label in zip(runs, labels):
    minutes = run.records[-1].get('time', float('nan')) / 60 if run.records else float('nan')
    steps = run.records[-1]['env_steps'] if run.records else 0
    print(f'{label}: {steps:,} env steps in {minutes:.0f} min')
    for task in tasks:
      x, y = smoothed_returns(run, task, _WINDOW.value)
      if not len(x):
        continue
      line = f'  {task}: first {y[0]:.2f}, best {y.max():.2f}, last {y[-1]:.2f}'
      if _THRESHOLD.value is not None:
        cross = first_crossing(x, y, _THRESHOLD.value)
        line += f', reached {_THRESHOLD.value:g} at ' + (f'{cross:,.0f} steps' if cross else 'never')
      print(line)


if __name__ == '__main__':
  _define_flags()
  app.run(main)
