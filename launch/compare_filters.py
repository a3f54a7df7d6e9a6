"""Compares the conv filters of two or more runs, layer by layer, over training.

  python launch/compare_filters.py --runs=runs/single,runs/multi,runs/popart \
      --points=5 --output=runs/filters

For every pair of runs, every conv layer both have with the same shape, and
`--points` evenly spaced moments of training (fractions of each run's last
checkpoint; the nearest intermediate checkpoint is used, so train with
--config.keep_intermediate=True), two distances between the layers' filters
(each output channel's kernel, flattened over kh x kw x cin):

  index    mean L2 distance between filter i of one run and filter i of the
           other (what a shared initialisation keeps comparable);
  matched  the same after matching filters one-to-one to minimise the total
           distance (Hungarian algorithm, scipy's linear_sum_assignment),
           which ignores the arbitrary order of filters between runs.

Distances are divided by the mean filter norm of the pair, so layers are
comparable. Input channels of deeper layers are not re-permuted to follow
the previous layer's matching. Writes filters.json, filters.csv and one plot
per layer (filters_<layer>.png) into --output.
"""

import csv
import itertools
import json
import os
from typing import Dict, List, Sequence

from absl import app
from absl import flags
from absl import logging
import numpy as np
from scipy.optimize import linear_sum_assignment

from agents.checkpoint import Checkpointer

_RUNS = flags.DEFINE_list('runs', None, 'Two or more run folders (workdirs) to compare.')
_POINTS = flags.DEFINE_integer('points', 5, 'Evenly spaced moments of training to compare.')
_OUTPUT = flags.DEFINE_string('output', 'filter_comparison', 'Folder for data and plots.')


def conv_kernels(params: Dict, prefix: str = '') -> Dict[str, np.ndarray]:
  """'torso/conv1' -> kernel [kh, kw, cin, cout] for every 4-D `kernel` leaf."""
  out = {}
  for name, value in params.items():
    path = f'{prefix}/{name}' if prefix else name
    if isinstance(value, dict):
      out.update(conv_kernels(value, path))
    elif name == 'kernel' and np.ndim(value) == 4:
      out[prefix] = np.asarray(value)
  return out


def filter_distances(a: np.ndarray, b: np.ndarray) -> Dict[str, float]:
  """Distances between two conv kernels [kh, kw, cin, cout] (see module doc)."""
  fa = a.reshape(-1, a.shape[-1]).T  # [cout, kh * kw * cin]
  fb = b.reshape(-1, b.shape[-1]).T
  scale = 0.5 * (np.linalg.norm(fa, axis=1).mean() + np.linalg.norm(fb, axis=1).mean())
  scale = scale if scale > 0 else 1.0
  index = np.linalg.norm(fa - fb, axis=1).mean() / scale
  cost = np.linalg.norm(fa[:, None, :] - fb[None, :, :], axis=-1)
  rows, cols = linear_sum_assignment(cost)
  matched = cost[rows, cols].mean() / scale
  return {'index': float(index), 'matched': float(matched)}


def pick_steps(steps: Sequence[int], points: int) -> List[int]:
  """The checkpoints nearest to `points` evenly spaced fractions of training."""
  steps = sorted(steps)
  if not steps:
    raise ValueError('run has no checkpoints')
  targets = np.linspace(0.0, 1.0, points) * steps[-1]
  return sorted({min(steps, key=lambda s: abs(s - t)) for t in targets})


def compare(runs: Dict[str, Dict[float, Dict[str, np.ndarray]]]) -> List[Dict]:
  """runs: name -> {fraction: {layer: kernel}}; rows of one distance each."""
  rows = []
  for (na, ka), (nb, kb) in itertools.combinations(runs.items(), 2):
    for (fa, la), (fb, lb) in zip(sorted(ka.items()), sorted(kb.items())):
      for layer in sorted(set(la) & set(lb)):
        if la[layer].shape != lb[layer].shape:
          continue
        d = filter_distances(la[layer], lb[layer])
        rows.append({'run_a': na, 'run_b': nb, 'fraction': fa, 'layer': layer, **d})
  return rows


def _load(workdir: str, points: int) -> Dict[float, Dict[str, np.ndarray]]:
  ckpt = Checkpointer(workdir, read_only=True)
  steps = pick_steps(ckpt.steps(), points)
  last = max(ckpt.steps())
  return {round(s / last, 4): conv_kernels(ckpt.restore_raw(s)['state']['params'])
          for s in steps}


def _plot(rows: List[Dict], output: str) -> List[str]:
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  paths = []
  for layer in sorted({r['layer'] for r in rows}):
    fig, ax = plt.subplots(figsize=(6, 4))
    pairs = sorted({(r['run_a'], r['run_b']) for r in rows if r['layer'] == layer})
    for pair in pairs:
      sel = sorted((r for r in rows if r['layer'] == layer and (r['run_a'], r['run_b']) == pair),
                   key=lambda r: r['fraction'])
      x = [r['fraction'] for r in sel]
      line, = ax.plot(x, [r['index'] for r in sel], '-o', label=f'{pair[0]} vs {pair[1]} (index)')
      ax.plot(x, [r['matched'] for r in sel], '--s', color=line.get_color(),
              label=f'{pair[0]} vs {pair[1]} (matched)')
    ax.set_xlabel('fraction of training')
    ax.set_ylabel('filter distance / mean filter norm')
    ax.set_title(layer)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(output, f'filters_{layer.replace("/", "_")}.png')
    fig.savefig(path, dpi=100)
    plt.close(fig)
    paths.append(path)
  return paths


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # orbax logs every restore at INFO
  if len(_RUNS.value) < 2:
    raise app.UsageError('--runs needs two or more run folders')
  for run in _RUNS.value:
    if not os.path.isdir(run):
      raise app.UsageError(f'no such run folder: {run}')
  names = [os.path.basename(os.path.normpath(r)) for r in _RUNS.value]
  runs = {n: _load(r, _POINTS.value) for n, r in zip(names, _RUNS.value)}
  rows = compare(runs)
  if not rows:
    raise app.UsageError('the runs share no conv layer of the same shape')
  os.makedirs(_OUTPUT.value, exist_ok=True)
  with open(os.path.join(_OUTPUT.value, 'filters.json'), 'w') as f:
    json.dump({'runs': dict(zip(names, _RUNS.value)), 'rows': rows}, f, indent=1)
  with open(os.path.join(_OUTPUT.value, 'filters.csv'), 'w', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  plots = _plot(rows, _OUTPUT.value)
  print(f'{"pair":40s} {"layer":16s} {"frac":>5s} {"index":>7s} {"matched":>7s}')
  for r in rows:
    print(f'{r["run_a"] + " vs " + r["run_b"]:40s} {r["layer"]:16s} {r["fraction"]:5.2f} '
          f'{r["index"]:7.3f} {r["matched"]:7.3f}')
  print(f'wrote {len(rows)} rows and {len(plots)} plots to {_OUTPUT.value}')


if __name__ == '__main__':
  flags.mark_flag_as_required('runs')
  app.run(main)
