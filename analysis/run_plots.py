"""Learning curves of runs per task (one PNG), their smoothed returns, the
first agent step at which each reaches a return, and the published Pong
references the figures draw. `launch/plot_runs.py` is the command line."""

from typing import Dict, List, Optional, Tuple

import numpy as np

from analysis import run_metrics
from infra import atomic_write

# Titles of the metric panels; other metrics are titled by their key.
PANEL_TITLES = {
    'entropy': 'policy entropy',
    'sps': 'agent steps / s',
    'policy/logit_std': "log-probabilities' spread over states",
    'kl_update': 'KL of one update',
    'kl_behaviour': 'KL(behaviour || learner)',
    'popart/mu/*': 'PopArt mu per task',
    'popart/sigma/*': 'PopArt sigma per task',
    'grad_policy/*': "each task's policy-gradient norm on the shared torso",
    'grad_baseline/*': "each task's value-gradient norm on the shared torso",
    'grad_share_policy/*': "each task's share of the torso gradient: policy",
    'grad_share_baseline/*': "each task's share of the torso gradient: value",
    'value_loss/*': "each task's value loss (normalised units)",
    'norm_target_mean/*': "each task's normalised targets: mean",
    'norm_target_std/*': "each task's normalised targets: spread",
    'advantage_rms/*': "each task's advantages (rms, sigma units)",
}

# Agent steps (4 frames each) at which published implementations' mean
# training return on Pong first reaches -15, 0 and +18 (low, high), read from
# their plots (docs/results.md, Pong; cleanrl docs/rl-algorithms/ppo, Cleanba
# static/cleanba main_10CPU.csv, moolib docs/atari_2.png, openai/baselines-results).
PONG_REFERENCES = {
    'cleanrl PPO': {-15: (0.75e6, 0.84e6), 0: (1.34e6, 1.44e6), 18: (3.2e6, 3.5e6)},
    'baselines PPO2': {-15: (0.5e6, 0.9e6), 0: (1.15e6, 1.5e6), 18: (2.2e6, 2.8e6)},
    'Cleanba IMPALA (ResNet)': {-15: (0.9e6, 0.9e6), 0: (2e6, 3e6), 18: (16e6, 16e6)},
    'TorchBeast IMPALA': {-15: (1e6, 1e6), 0: (1.4e6, 1.4e6), 18: (3.2e6, 3.2e6)},
    'moolib IMPALA': {-15: (2.2e6, 2.2e6), 0: (3.4e6, 3.4e6), 18: (8.8e6, 8.8e6)},
    'baselines A2C': {-15: (2.1e6, 2.5e6), 0: (2.8e6, 4.2e6), 18: (5e6, 8.4e6)},
}
# This repo's Nature CNN on Pong (recipe=vtrace, 3M agent steps, docs/results.md),
# beside the published ones: what other networks on the same recipe are held to.
PONG_NATURE_CNN = {'this repo, Nature CNN, recipe=vtrace': {-15: (0.54e6, 0.54e6),
                                                            0: (0.68e6, 0.68e6),
                                                            18: (1.12e6, 1.12e6)}}
_PUBLISHED = {f'{name} (published)': levels for name, levels in PONG_REFERENCES.items()}
# --references choices -> the entries drawn, under their legend labels.
REFERENCES = {'pong': _PUBLISHED, 'pong+nature_cnn': {**PONG_NATURE_CNN, **_PUBLISHED}}


def per_task_steps(run):
  """A new Run whose rows' env_steps are divided by its number of tasks: the
  agent steps each task got (the actors step every task's envs equally)."""
  n = max(1, len(run.task_names))
  return run_metrics.Run(run.name, [dict(r, env_steps=r['env_steps'] / n) for r in run.records],
                     run.config)


def parse_uniform(items: List[str]) -> Dict[str, float]:
  """--uniform's '<task>=<return>' items as {task: return}; ValueError for any other item."""
  out = {}
  for item in items:
    task, sep, value = item.partition('=')
    try:
      out[task] = float(value)
    except ValueError:
      sep = ''
    if not sep or not task:
      raise ValueError(f'--uniform takes <task>=<return>, got {item!r}')
  return out


def smoothed_returns(run, task: str, window: int) -> Tuple[np.ndarray, np.ndarray]:
  """(env steps, mean return of the games that ended in (step - window, step], each game weighted
  once however the log windows cut them) at every log row with the task's return."""
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


def rolling_mean(x: np.ndarray, y: np.ndarray, n: int) -> Tuple[np.ndarray, np.ndarray]:
  """(x, the mean of the last n values of y up to each point, fewer at the
  start); x and y as given for n <= 1."""
  if n <= 1 or not len(y):
    return x, y
  sums = np.cumsum(np.concatenate([[0.0], y]))
  counts = np.minimum(np.arange(1, len(y) + 1), n)
  return x, (sums[1:] - sums[np.arange(len(y)) + 1 - counts]) / counts


def first_crossing(steps: np.ndarray, values: np.ndarray, threshold: float) -> Optional[float]:
  above = np.flatnonzero(values >= threshold)
  return float(steps[above[0]]) if len(above) else None


def draw_references(ax, references, xmax: Optional[float] = None):
  """Draws references (label -> {return level: (low, high) agent steps}) as horizontal bars, one
  implementation's bars of a level apart from the next; bars starting past `xmax` are left out."""
  import matplotlib.pyplot as plt
  colours = plt.rcParams['axes.prop_cycle'].by_key()['color']
  for k, (name, levels) in enumerate(references.items()):
    colour = colours[(k + 4) % len(colours)]
    offset = (k - (len(references) - 1) / 2) * 0.6   # keep the bars of one level apart
    first = True
    for level, (lo, hi) in sorted(levels.items()):
      if xmax is not None and lo > xmax:
        continue
      mid = (lo + hi) / 2
      ax.errorbar([mid], [level + offset], xerr=[[mid - lo], [hi - mid]], fmt='s', ms=3,
                  color=colour, capsize=3, lw=1, alpha=0.8,
                  label=name if first else None)
      first = False


def plot(runs, labels: List[str], output: str, window: int, random_score=None,
         threshold=None, title: str = '', references=None,
         panels: Tuple[str, ...] = ('entropy', 'sps'), uniform: Optional[Dict[str, float]] = None,
         xlabel: str = 'agent steps', smooth: int = 1):
  """Draws the runs' learning curves per task and metric panels into one PNG
  (90 dpi); returns the tasks drawn, sorted.

  One return panel per task (smoothed_returns); with one task it spans the first row and takes the
  random, threshold and reference lines. Then one panel per key of `panels` ('<prefix>/*': a line
  per task), smoothed over `smooth` log rows (rolling_mean).

  Args:
    runs: run_metrics.Runs (per_task_steps for agent steps per task).
    window: the return's window, in the runs' env steps.
    references: REFERENCES' values (one task only).
    uniform: task -> uniform play's return, drawn as a line.
  """
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  tasks = sorted({t for run in runs for t in run.task_names})
  cols = max(min(3, len(tasks)), min(3, len(panels)))
  task_rows = -(-len(tasks) // cols)
  rows = task_rows + -(-len(panels) // cols)
  fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.2 * rows), squeeze=False)
  if len(tasks) == 1 and cols > 1:   # one task: its return panel spans the first row
    spanning = fig.add_subplot(axes[0][0].get_gridspec()[0, :])
    for ax in axes[0]:
      ax.remove()
    axes[0] = [spanning] * cols
  for i, task in enumerate(tasks):
    ax = axes[i // cols][i % cols]
    for k, (run, label) in enumerate(zip(runs, labels)):
      x, y = smoothed_returns(run, task, window)
      if len(x):
        ax.plot(x, y, label=label, color=f'C{k}')   # a run's colour in every panel
    if random_score is not None and len(tasks) == 1:
      ax.axhline(random_score, color='grey', ls='--', lw=1, label='random')
    if uniform and task in uniform:
      ax.axhline(uniform[task], color='grey', ls='--', lw=1, label='uniform play')
    if threshold is not None and len(tasks) == 1:
      ax.axhline(threshold, color='red', ls=':', lw=1, label=f'{threshold:g}')
    if references and len(tasks) == 1:
      xmax = max((run.records[-1]['env_steps'] for run in runs if run.records), default=None)
      draw_references(ax, references, 1.1 * xmax if xmax else None)
    ax.set_title(f'{task}: return (games ending in the last {window // 1000:g}k steps)', fontsize=8)
    ax.set_xlabel(xlabel)
    if references and len(tasks) == 1:   # many entries: beside the panel, not over the curves
      ax.legend(fontsize=7, loc='upper left', bbox_to_anchor=(1.01, 1.0))
    else:
      ax.legend(fontsize=7)
  for i in range(len(tasks), task_rows * cols):
    if not (len(tasks) == 1 and i < cols):
      axes[i // cols][i % cols].axis('off')
  for row in axes[task_rows:]:
    for ax in row:
      ax.axis('off')
  for j, key in enumerate(panels):
    ax = axes[task_rows + j // cols][j % cols]
    ax.axis('on')
    for run, label in zip(runs, labels):
      if '*' in key:   # one line per task: e.g. popart/sigma/*
        for task in run.task_names:
          x, y = rolling_mean(*run.series(key.replace('*', task)), smooth)
          if len(x):
            ax.plot(x, y, label=f'{label}: {task}' if len(runs) > 1 else task, lw=0.8)
      else:
        x, y = rolling_mean(*run.series(key), smooth)
        ax.plot(x, y, label=label, lw=0.8, color=f'C{runs.index(run)}')
    if key.startswith('popart/'):   # games' scales differ 100x; mu may be negative
      ax.set_yscale('symlog', linthresh=1.0)
    if key.startswith('dead/'):
      ax.set_ylim(0, 1)
    if key.startswith(('kl', 'grad_policy', 'grad_baseline', 'value_loss')):
      # collapses and tasks differ by 100x: a log scale keeps the rest readable
      ax.set_yscale('log')
    ax.set_title(PANEL_TITLES.get(key, key.replace('dead/', 'share of units dead: ')), fontsize=8)
    ax.set_xlabel(xlabel)
    ax.legend(fontsize=7)
  if title:
    fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  with atomic_write.atomic_path(output) as tmp:   # a full disk leaves no empty PNG
    fig.savefig(tmp, dpi=90)
  return tasks
