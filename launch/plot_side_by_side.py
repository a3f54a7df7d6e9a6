"""Our run beside NLE's own agent: training returns against agent steps and
wall-clock time (two PNGs), and the binned returns as a markdown table.

  python launch/plot_side_by_side.py --run=runs/monk_500k \\
      --peer_dir=runs/sbs/nle_agent --peer_stdout=runs/sbs/nle.log \\
      --output=docs/nle_side_by_side

--peer_dir is NLE's agent's --savedir, --peer_stdout what it printed (the only record of its times).
Bins weight rows by their games, with cluster-robust standard errors (analysis/peer_curves.py).
"""

import json
import os

from absl import app
from absl import flags
import numpy as np

from analysis import peer_curves
from infra import atomic_write
from infra import cli

_RUN = flags.DEFINE_string('run', None, 'Our run folder (metrics.jsonl, config.json).')
_TASK = flags.DEFINE_string('task', None, "Our run's task to compare (default: its only one).")
_PEER_DIR = flags.DEFINE_string('peer_dir', None, "NLE agent's --savedir.")
_PEER_STDOUT = flags.DEFINE_string('peer_stdout', None, "What NLE's agent printed.")
_BIN_STEPS = flags.DEFINE_integer('bin_steps', 50_000, 'Agent steps per bin.', lower_bound=1)
_BIN_SECONDS = flags.DEFINE_float('bin_seconds', 300.0, 'Seconds per bin.', lower_bound=1.0)
_WINDOW = flags.DEFINE_integer('window', 100_000, 'Agent steps of the final mean.', lower_bound=1)
_STEPS = flags.DEFINE_integer('steps', None, 'Compare up to this many agent steps (default: '
                              'the fewer of the two runs).')
_OUTPUT = flags.DEFINE_string('output', 'side_by_side', 'PNG prefix: <output>_steps.png, '
                              '<output>_time.png.')
_LABELS = flags.DEFINE_list('labels', ['this project', "NLE's agent"], 'Two labels.')


def _load_ours(run: str, task):
  from analysis import run_metrics  # pylint: disable=import-outside-toplevel
  loaded = run_metrics.load_metrics(run)
  tasks = sorted({k.split('/', 1)[1] for r in loaded.records for k in r
                  if k.startswith('episodes/')})
  if task is None:
    if len(tasks) != 1:
      raise ValueError(f'{run} has tasks {", ".join(tasks)}; name one with --task')
    task = tasks[0]
  return task, peer_curves.our_curve(loaded.records, task)


def _fmt(mean, se):
  return f'{mean:.1f} +- {se:.1f}' if se == se else f'{mean:.1f}'


def _plot(curves, labels, axis, width, end, path, title):
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, ax = plt.subplots(figsize=(7, 4.2))
  for curve, label in zip(curves, labels):
    bins = peer_curves.binned(curve, width, axis, end=end[label])
    x = [(b.lo + b.hi) / 2 for b in bins]
    m = [b.mean for b in bins]
    se = [0.0 if b.se != b.se else b.se for b in bins]
    ax.errorbar(x, m, yerr=se, marker='o', ms=3, capsize=2, label=label)
  unit = 'agent steps' if axis == 'steps' else 'wall-clock seconds'
  ax.set_xlabel(unit)
  ax.set_ylabel('training return (mean +- s.e. per bin)')
  ax.set_title(title, fontsize=9)
  ax.legend(fontsize=8)
  ax.grid(alpha=0.3)
  fig.tight_layout()
  with atomic_write.atomic_path(path) as tmp:   # whole or not at all
    fig.savefig(tmp, dpi=110)
  plt.close(fig)


def main(argv):
  del argv
  for flag in (_RUN, _PEER_DIR, _PEER_STDOUT):
    if not flag.value:
      raise app.UsageError(f'--{flag.name} is required')
  if len(_LABELS.value) != 2:
    raise app.UsageError('--labels takes two labels')
  problem = atomic_write.output_problem(f'{_OUTPUT.value}_steps.png')
  if problem:   # before reading and plotting, not after
    cli.fail(problem)
  try:
    task, ours = _load_ours(_RUN.value, _TASK.value)
    peer = peer_curves.peer_curve(os.path.join(_PEER_DIR.value, 'latest', 'logs.tsv'),
                                  _PEER_STDOUT.value)
  except (OSError, ValueError, KeyError) as e:
    cli.fail(str(e))
  steps = _STEPS.value or int(min(ours.steps.max(), peer.steps.max()))
  ours_label, peer_label = _LABELS.value
  curves, labels = (ours, peer), (ours_label, peer_label)
  end_steps = {label: steps for label in labels}
  # Each run's time at `steps` agent steps (its rows interpolated).
  end_seconds = {label: float(np.interp(steps, c.steps, c.seconds))
                 for c, label in zip(curves, labels)}
  title = f'{task}: training returns, {_BIN_STEPS.value:,}-step bins'
  try:
    _plot(curves, labels, 'steps', _BIN_STEPS.value, end_steps, f'{_OUTPUT.value}_steps.png', title)
    _plot(curves, labels, 'seconds', _BIN_SECONDS.value, end_seconds, f'{_OUTPUT.value}_time.png',
          f'{task}: training returns, {_BIN_SECONDS.value:g}-second bins')
  except OSError as e:   # a full disk: one line
    cli.fail(f'cannot write {_OUTPUT.value}_*.png: {e.strerror or e}')
  print(f"Training return per {_BIN_STEPS.value:,}-step bin, mean +- s.e. (games; for "
        f"{peer_label}: logged rows, each the games that ended in one learner step, about one)")
  print(f'| agent steps | {ours_label} | {peer_label} |')
  print('| --- | --- | --- |')
  ours_bins = {b.lo: b for b in peer_curves.binned(ours, _BIN_STEPS.value, 'steps', steps)}
  peer_bins = {b.lo: b for b in peer_curves.binned(peer, _BIN_STEPS.value, 'steps', steps)}
  for lo in sorted(set(ours_bins) | set(peer_bins)):
    cells = []
    for table in (ours_bins, peer_bins):
      b = table.get(lo)
      cells.append(f'{_fmt(b.mean, b.se)} ({b.games})' if b else '')
    hi = min(lo + _BIN_STEPS.value, steps)
    print(f'| {int(lo):,}-{int(hi):,} | {cells[0]} | {cells[1]} |')
  summary = {}
  for curve, label in zip(curves, labels):
    mean, se, games = peer_curves.last_window(curve, _WINDOW.value, steps)
    reached = end_seconds[label]
    summary[label] = {'mean': mean, 'se': se, 'games': games, 'seconds_to_steps': reached}
    print(f'{label}: last {_WINDOW.value:,} of {steps:,} agent steps: {_fmt(mean, se)} '
          f'({games} games); {steps:,} steps logged by {reached:,.0f} s')
  try:
    with atomic_write.atomic_open(f'{_OUTPUT.value}.json') as f:   # whole or not at all
      json.dump({'task': task, 'steps': steps, 'window': _WINDOW.value, **summary}, f, indent=1)
  except OSError as e:
    cli.fail(f'cannot write {_OUTPUT.value}.json: {e.strerror or e}')
  print(f'wrote {_OUTPUT.value}_steps.png, {_OUTPUT.value}_time.png, {_OUTPUT.value}.json')


if __name__ == '__main__':
  cli.run(main)
