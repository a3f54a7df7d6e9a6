"""A markdown table of runs at fixed agent steps per task.

  python launch/compare_runs.py runs/pc_popart runs/pc_popart_debiased \\
      --labels='default,debiased start' --steps=500000,750000 --threshold=Pong=-15

One row per run and task: the training return (games ending in the last --window agent steps per
task) at each of --steps, the first agent step per task at which that return reaches the task's
--threshold, and medians up to the last of --steps of the task's shares of the shared torso's
gradient (policy / value, logged by multi-task V-trace runs: log.task_gradients_seconds), of
kl_update and of agent steps/s. A run that has not reached a step shows '-' there. Reads
metrics.jsonl or an archived metrics.jsonl.gz.
"""

from absl import app
from absl import flags

from analysis import run_compare
from analysis import run_metrics
from analysis import run_plots
from infra import cli

_LABELS = flags.DEFINE_list('labels', None, 'One label per run (default: folder names).')
_STEPS = flags.DEFINE_list('steps', ['500000', '750000'], 'Agent steps per task to compare at.')
_WINDOW = flags.DEFINE_integer('window', 100_000, 'Agent steps per task of each return.',
                               lower_bound=1)
_THRESHOLD = flags.DEFINE_list('threshold', [], 'task=return: the first step each run passes it.')


def main(argv):
  workdirs = argv[1:]
  if not workdirs:
    raise app.UsageError('give one or more run folders')
  labels = _LABELS.value or workdirs
  if len(labels) != len(workdirs):
    raise app.UsageError(f'{len(labels)} labels for {len(workdirs)} runs')
  try:
    steps = [float(s) for s in _STEPS.value]
    thresholds = run_plots.parse_uniform(_THRESHOLD.value)
  except ValueError as e:
    raise app.UsageError(f'--steps and --threshold take numbers: {e}')
  try:
    runs = run_metrics.load_all_metrics(workdirs)
  except (OSError, ValueError) as e:
    cli.fail(str(e))
  threshold = ', '.join(f'{t} {v:g}' for t, v in thresholds.items()) or 'threshold'
  header = (['run', 'task'] + [f'return at {s / 1e6:g}M' for s in steps]
            + [h.format(threshold=threshold) for h in run_compare.HEADER_AFTER_RETURNS])
  print('| ' + ' | '.join(header) + ' |')
  print('|' + ' --- |' * len(header))
  for row in run_compare.table_rows(runs, labels, steps, _WINDOW.value, thresholds):
    print('| ' + ' | '.join(row) + ' |')


if __name__ == '__main__':
  cli.run(main)
