"""Learning curves of runs, per task, into one PNG; and when each first reached a return.

  python launch/plot_runs.py runs/pong_ppo_3m runs/pong_impala --output=docs/pong.png \\
      --references=pong --thresholds=-15,0,18

Returns are whole games, averaged over those that ended in the last --window env steps. Panels: the
return per task, then one per --panels metric (a key with * draws one line per task, e.g.
popart/mu/*). --references=pong draws published implementations' steps to Pong returns of -15, 0 and
+18; --per_task_steps puts agent steps per task on the x axis, so multi-task runs line up with
single-task ones.
"""

from absl import app
from absl import flags

from analysis import run_metrics
from analysis import run_plots
from infra import atomic_write
from infra import cli

_OUTPUT = flags.DEFINE_string('output', 'curves.png', 'PNG to write.')
_LABELS = flags.DEFINE_list('labels', [], 'One label per run folder (default: folder names).')
_WINDOW = flags.DEFINE_integer('window', 100_000, 'Env steps the smoothed return averages over.')
_RANDOM = flags.DEFINE_float('random', None, 'Random play\'s score: a dashed line.')
_THRESHOLD = flags.DEFINE_float('threshold', None, 'A return to report first crossings of.')
_TITLE = flags.DEFINE_string('title', '', 'Figure title.')
_THRESHOLDS = flags.DEFINE_list('thresholds', [], 'Returns to report first crossings of.')
_PANELS = flags.DEFINE_list('panels', ['entropy', 'sps'], 'Metrics drawn in panels of their own.')
_MAX_STEPS = flags.DEFINE_integer('max_steps', 0, 'Draw only env steps up to this (0: all).')
_SMOOTH = flags.DEFINE_integer('smooth', 1, 'Panel metrics as the mean of this many logged '
                               'values up to each (1: as logged).', lower_bound=1)
_PER_TASK_STEPS = flags.DEFINE_bool(
    'per_task_steps', False, "x axis: a run's agent steps per task (env steps / its tasks).")
_UNIFORM = flags.DEFINE_list('uniform', [], "Uniform play's score per task, as "
                             '<task>=<return>: a dashed line on that task\'s panel.')
_REFERENCES = flags.DEFINE_enum('references', None, list(run_plots.REFERENCES),
                                "Published steps to given returns to draw (one task only).")


def main(argv):
  workdirs = argv[1:]
  if not workdirs:
    raise app.UsageError('give one or more run folders')
  problem = atomic_write.output_problem(_OUTPUT.value)
  if problem:   # before reading and plotting, not after
    cli.fail(f'{problem}')
  try:
    runs = run_metrics.load_all_metrics(workdirs)
  except (OSError, ValueError) as e:  # not a run folder, or not its metrics: one line
    cli.fail(str(e))
  try:
    uniform = run_plots.parse_uniform(_UNIFORM.value)
  except ValueError as e:
    raise app.UsageError(str(e))
  if _PER_TASK_STEPS.value:
    runs = [run_plots.per_task_steps(run) for run in runs]
  if _MAX_STEPS.value:
    runs = [run_metrics.Run(run.name, [r for r in run.records if r['env_steps'] <= _MAX_STEPS.value],
                        run.config) for run in runs]
  labels = _LABELS.value or [r.name for r in runs]
  if len(labels) != len(runs):
    raise app.UsageError(f'{len(labels)} labels for {len(runs)} runs')
  try:
    tasks = run_plots.plot(
        runs, labels, _OUTPUT.value, _WINDOW.value, _RANDOM.value, _THRESHOLD.value, _TITLE.value,
        run_plots.REFERENCES.get(_REFERENCES.value), tuple(_PANELS.value), uniform,
        'agent steps per task' if _PER_TASK_STEPS.value else 'agent steps', _SMOOTH.value)
  except OSError as e:   # a full disk: one line (run_plots.plot leaves no PNG)
    cli.fail(f'cannot write {_OUTPUT.value}: {e.strerror or e}')
  thresholds = [float(t) for t in _THRESHOLDS.value]
  if _THRESHOLD.value is not None:
    thresholds.insert(0, _THRESHOLD.value)
  print(f'wrote {_OUTPUT.value}')
  for run, label in zip(runs, labels):
    minutes = run.records[-1].get('time', float('nan')) / 60 if run.records else float('nan')
    steps = run.records[-1]['env_steps'] if run.records else 0
    unit = 'agent steps per task' if _PER_TASK_STEPS.value else 'env steps'
    print(f'{label}: {steps:,.0f} {unit} in {minutes:.0f} min')
    for task in tasks:
      x, y = run_plots.smoothed_returns(run, task, _WINDOW.value)
      if not len(x):
        continue
      line = f'  {task}: first {y[0]:.2f}, best {y.max():.2f}, last {y[-1]:.2f}'
      for threshold in thresholds:
        cross = run_plots.first_crossing(x, y, threshold)
        line += f', reached {threshold:g} at ' + (f'{cross:,.0f} steps' if cross is not None else 'never')
      print(line)


if __name__ == '__main__':
  cli.run(main)
