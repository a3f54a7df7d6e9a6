"""A population's figure: each member's training return with its copies marked and each adapted
hyperparameter's schedule, against env steps; optionally a fixed run beside them.

  python launch/plot_pbt.py --population=runs/pong_pbt \\
      --baseline=runs/pong_fixed_1m --output=docs/pbt_pong.png
"""

import os

from absl import flags

from analysis import pbt_curves
from infra import atomic_write
from infra import cli
from rundir import run_folder

_POPULATION = flags.DEFINE_string('population', None, "launch/pbt.py's --config.workdir.")
_BASELINE = flags.DEFINE_string('baseline', None, 'A fixed-hyperparameter run folder to draw '
                                'beside the members.')
_TASK = flags.DEFINE_string('task', None, 'Task whose return to draw (default: the only one).')
_EPISODES = flags.DEFINE_integer('episodes', 100, 'Games per point of the return.', lower_bound=1)
_OUTPUT = flags.DEFINE_string('output', 'pbt.png', 'The PNG to write.')


def _task(rows_by_member):
  tasks = sorted({k.split('/', 1)[1] for rows in rows_by_member.values() for r in rows
                  for k in r if k.startswith('episodes/')})
  if _TASK.value:
    return _TASK.value
  if not tasks:
    cli.fail(f'no member of {_POPULATION.value} has finished a game yet')
  if len(tasks) != 1:
    cli.fail(f'the members have tasks {", ".join(tasks)}; name one with --task')
  return tasks[0]


def _load():
  """(members' rows, copies, adapted hyperparameters), or one line and exit 2."""
  try:
    members, events = pbt_curves.load_population(_POPULATION.value)
    if not members:
      cli.fail(f'no member run folders in {_POPULATION.value}/members')
    first = os.path.join(_POPULATION.value, 'members', sorted(members)[0])
    adapted = list((run_folder.read_config(first) or {}).get('pbt', {}).get('adapt', ()))
  except FileNotFoundError as e:
    cli.fail(f'{_POPULATION.value} is not a population folder (no {e.filename})')
  except (OSError, ValueError) as e:   # unreadable files, a config.json that is not JSON
    cli.fail(str(e))
  return members, events, adapted


def _baseline_rows():
  """--baseline's metrics rows (metrics.jsonl or an archive's .gz), or one line and exit 2."""
  try:
    return run_folder.read_metrics(_BASELINE.value)
  except (OSError, ValueError) as e:   # no metrics file, unreadable, cut off, not JSON rows
    cli.fail(f'--baseline: {e}')


def main(argv):
  del argv
  problem = atomic_write.output_problem(_OUTPUT.value)
  if problem:   # before reading and plotting, not after
    cli.fail(problem)
  members, events, adapted = _load()
  baseline = _baseline_rows() if _BASELINE.value else None
  task = _task(members)
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, axes = plt.subplots(1 + len(adapted), 1, figsize=(8, 3.2 + 2.2 * len(adapted)),
                           sharex=True, squeeze=False)
  axes = axes[:, 0]   # one panel too (nothing adapted) is a sequence of one
  colours = plt.rcParams['axes.prop_cycle'].by_key()['color']
  for i, (name, rows) in enumerate(sorted(members.items())):
    colour = colours[i % len(colours)]
    steps, values = pbt_curves.rolling_return(rows, task, _EPISODES.value)
    axes[0].plot(steps, values, color=colour, label=name)
    for event in pbt_curves.copies(events, name):
      axes[0].axvline(event['env_steps'], color=colour, alpha=0.25, lw=0.8)
      axes[0].annotate(f'<- {event["donor"][-2:]}', (event['env_steps'], axes[0].get_ylim()[0]),
                       color=colour, fontsize=7, rotation=90, va='bottom')
    for ax, hp in zip(axes[1:], adapted):
      for start, end, value in pbt_curves.schedule(rows, hp):
        ax.plot([start, end], [value, value], color=colour)
    final = values[-1] if values else float('nan')
    made = [e['donor'] for e in pbt_curves.copies(events, name)]
    print(f'{name}: return {final:.2f} (last {_EPISODES.value} games) at env step '
          f'{steps[-1] if steps else 0:,}; copied {", ".join(made) or "no one"}')
  if _BASELINE.value:
    steps, values = pbt_curves.rolling_return(baseline, task, _EPISODES.value)
    axes[0].plot(steps, values, color='black', ls='--', label='fixed hyperparameters')
    if values:
      print(f'baseline {_BASELINE.value}: return {values[-1]:.2f} at env step {steps[-1]:,}')
  axes[0].set_ylabel(f'{task} return (last {_EPISODES.value} games)')
  axes[0].legend(fontsize=8)
  for ax, hp in zip(axes[1:], adapted):
    ax.set_yscale('log')
    ax.set_ylabel(hp)
  axes[-1].set_xlabel('agent steps (per member)')
  axes[0].set_title(f'PBT, {len(members)} members, {len(events)} copies')
  fig.tight_layout()
  try:
    with atomic_write.atomic_path(_OUTPUT.value) as tmp:   # whole or not at all
      fig.savefig(tmp, dpi=110)
  except OSError as e:   # a full disk: one line
    cli.fail(f'cannot write {_OUTPUT.value}: {e.strerror or e}')
  print(f'wrote {_OUTPUT.value}')


if __name__ == '__main__':
  flags.mark_flag_as_required('population')
  cli.run(main)
