"""Distances between the conv filters of runs, layer by layer, over training
(`launch/compare_filters.py` is the command line).

'index': mean L2 distance between filter i of one run and filter i of the other (what a shared
initialisation keeps comparable); 'matched': the same after a one-to-one matching of filters
minimising the total (Hungarian algorithm), which ignores their arbitrary order. Both are divided by
the mean filter norm so layers compare. Deeper layers' input channels are not re-permuted to follow
the previous layer's matching.
"""

import itertools
import os
from typing import Dict, List, Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

from agents.checkpoint import Checkpointer
from infra import atomic_write


def conv_kernels(params: Dict, prefix: str = '') -> Dict[str, np.ndarray]:
  """Module path ('torso/conv1') -> kernel [kh, kw, cin, cout] as numpy, for
  every 4-D leaf named `kernel` of a Flax params tree under `prefix`."""
  out = {}
  for name, value in params.items():
    path = f'{prefix}/{name}' if prefix else name
    if isinstance(value, dict):
      out.update(conv_kernels(value, path))
    elif name == 'kernel' and np.ndim(value) == 4:
      out[prefix] = np.asarray(value)
  return out


def filter_distances(a: np.ndarray, b: np.ndarray) -> Dict[str, float]:
  """{'index', 'matched'} between two [kh, kw, cin, cout] kernels, each filter flattened over kh x
  kw x cin, divided by the mean of the two kernels' mean filter norms (1 when that is 0)."""
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
  """The distinct checkpoint steps nearest to `points` evenly spaced fractions
  (0 to 1) of the last step, sorted; ValueError when `steps` is empty."""
  steps = sorted(steps)
  if not steps:
    raise ValueError('run has no checkpoints')
  targets = np.linspace(0.0, 1.0, points) * steps[-1]
  return sorted({min(steps, key=lambda s: abs(s - t)) for t in targets})


def compare(runs: Dict[str, Dict[float, Dict[str, np.ndarray]]]) -> List[Dict]:
  """The filter distances of every pair of runs, layer by layer, the runs'
  fractions paired in sorted order, over the layers both have with one shape.

  Args:
    runs: name -> {fraction of training: {layer: kernel}} (load_kernels).

  Returns:
    Rows {'run_a', 'run_b', 'fraction' (run_a's), 'layer', 'index', 'matched'}.
  """
  rows = []
  for (na, ka), (nb, kb) in itertools.combinations(runs.items(), 2):
    for (fa, la), (fb, lb) in zip(sorted(ka.items()), sorted(kb.items())):
      for layer in sorted(set(la) & set(lb)):
        if la[layer].shape != lb[layer].shape:
          continue
        d = filter_distances(la[layer], lb[layer])
        rows.append({'run_a': na, 'run_b': nb, 'fraction': fa, 'layer': layer, **d})
  return rows


def load_kernels(workdir: str, points: int) -> Dict[float, Dict[str, np.ndarray]]:
  """A run's conv kernels at `points` evenly spaced checkpoints (pick_steps), read-only: {step /
  last step (4 decimals): conv_kernels}; ValueError naming the folder when the run has none."""
  ckpt = Checkpointer(workdir, read_only=True)
  if not ckpt.steps():
    raise ValueError(f'{workdir} has no checkpoints')
  steps = pick_steps(ckpt.steps(), points)
  last = max(ckpt.steps())
  return {round(s / last, 4): conv_kernels(ckpt.restore_raw(s)['state']['params'])
          for s in steps}


def plot(rows: List[Dict], output: str) -> List[str]:
  """Plots each pair's distances over training to <output>/filters_<layer>.png
  ('/' as '_'), one figure per layer; returns the paths."""
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
    with atomic_write.atomic_path(path) as tmp:   # whole or not at all
      fig.savefig(tmp, dpi=100)
    plt.close(fig)
    paths.append(path)
  return paths
