"""A markdown table of finished runs, one row per run and task: budget, wall time, speed, the latest
evaluation (mean +- standard error), the training return at the end, and PopArt's final statistics.

  python launch/run_table.py runs/pc_popart runs/pc_unclipped runs/pc_clipped \\
      --labels='a. PopArt,b. unclipped,c. clipped' --uniform=runs/pc_popart/eval/3000000_uniform.json

Wall time is training only (resumed runs stitched); the evaluation is the
newest eval/<step>.json, its step named when not the run's last.
"""

import os

from absl import app
from absl import flags

from analysis import run_table
from infra import cli

_LABELS = flags.DEFINE_list('labels', None, 'One label per run (default: folder names).')
_UNIFORM = flags.DEFINE_string('uniform', None, 'A uniform-play evaluation JSON '
                               '(eval/<step>_uniform.json) to add as rows.')
_WINDOW = flags.DEFINE_integer('window', 100_000, 'Agent steps per task of the training '
                               'return at the end.', lower_bound=1)


def main(argv):
  workdirs = argv[1:]
  if not workdirs:
    raise app.UsageError('give one or more run folders')
  labels = _LABELS.value or [os.path.basename(os.path.normpath(w)) for w in workdirs]
  if len(labels) != len(workdirs):
    raise app.UsageError(f'--labels has {len(labels)} labels for {len(workdirs)} runs')
  try:
    rows = [row for w, label in zip(workdirs, labels)
            for row in run_table.run_rows(w, label, _WINDOW.value)]
    if _UNIFORM.value:
      rows += run_table.uniform_rows(_UNIFORM.value)
  except (OSError, ValueError) as e:  # not a run folder, not its metrics, not an evaluation
    cli.fail(str(e))
  print(run_table.markdown(rows))


if __name__ == '__main__':
  cli.run(main)
