"""Compares the conv filters of two or more runs, layer by layer, over training.

  python launch/compare_filters.py --runs=runs/single,runs/multi,runs/popart \
      --points=5 --output=runs/filters

At `--points` moments (the nearest intermediate checkpoints: train with
--config.keep_intermediate=True), the 'index' and 'matched' distances (analysis/filters.py) of each
conv layer two runs share. Writes filters.json, filters.csv and filters_<layer>.png.
"""

import csv
import json
import os

from absl import app
from absl import flags
from absl import logging

from agents.checkpoint import CheckpointError
from analysis import filters
from infra import atomic_write
from infra import cli

_RUNS = flags.DEFINE_list('runs', None, 'Two or more run folders (workdirs) to compare.')
_POINTS = flags.DEFINE_integer('points', 5, 'Evenly spaced moments of training to compare.')
_OUTPUT = flags.DEFINE_string('output', 'filter_comparison', 'Folder for data and plots.')


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)  # orbax: every restore (INFO), read-only folders (WARNING)
  if len(_RUNS.value) < 2:
    raise app.UsageError('--runs needs two or more run folders')
  for run in _RUNS.value:
    if not os.path.isdir(run):
      cli.fail(f'no such run folder: {run}')
  names = [os.path.basename(os.path.normpath(r)) for r in _RUNS.value]
  try:
    runs = {n: filters.load_kernels(r, _POINTS.value) for n, r in zip(names, _RUNS.value)}
  except (ValueError, OSError, CheckpointError) as e:   # no checkpoints, a damaged one
    cli.fail(str(e))
  rows = filters.compare(runs)
  if not rows:
    cli.fail('the runs share no conv layer of the same shape')
  try:   # each file whole or not at all; a full disk is one line
    os.makedirs(_OUTPUT.value, exist_ok=True)
    with atomic_write.atomic_open(os.path.join(_OUTPUT.value, 'filters.json')) as f:
      json.dump({'runs': dict(zip(names, _RUNS.value)), 'rows': rows}, f, indent=1)
    with atomic_write.atomic_open(os.path.join(_OUTPUT.value, 'filters.csv'),
                                 newline='') as f:
      writer = csv.DictWriter(f, fieldnames=list(rows[0]))
      writer.writeheader()
      writer.writerows(rows)
    plots = filters.plot(rows, _OUTPUT.value)
  except OSError as e:
    cli.fail(f'cannot write into {_OUTPUT.value}: {e.strerror or e}')
  print(f'{"pair":40s} {"layer":16s} {"frac":>5s} {"index":>7s} {"matched":>7s}')
  for r in rows:
    print(f'{r["run_a"] + " vs " + r["run_b"]:40s} {r["layer"]:16s} {r["fraction"]:5.2f} '
          f'{r["index"]:7.3f} {r["matched"]:7.3f}')
  print(f'wrote {len(rows)} rows and {len(plots)} plots to {_OUTPUT.value}')


if __name__ == '__main__':
  flags.mark_flag_as_required('runs')
  cli.run(main)
