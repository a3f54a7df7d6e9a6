"""A sweep yaml run on this machine without a wandb account (rundir/sweep.py;
trials log offline unless --set gives config.wandb.mode):

  python launch/sweep.py --sweep=launch/sweeps/atari_popart.yaml --dir=runs/sweep_lr \\
      --method=random --trials=8 --set=config.total_env_steps=3000000
"""

import sys

from absl import app
from absl import flags
import yaml

from infra import cli
from rundir import sweep as sweep_lib

_SWEEP = flags.DEFINE_string('sweep', None, 'The sweep yaml (launch/sweeps/*.yaml).')
_DIR = flags.DEFINE_string('dir', None, 'The sweep folder: sweep.json and a run folder per trial.')
_METHOD = flags.DEFINE_string('method', None, "'grid' or 'random' (default: the yaml's, when it "
                              'is one of them).')
_TRIALS = flags.DEFINE_integer('trials', 0, 'Trials of a random search.', lower_bound=0)
_SEED = flags.DEFINE_integer('seed', 0, 'Seeds the random search.')
_SET = flags.DEFINE_multi_string('set', [], 'NAME=VALUE: a parameter fixed at VALUE (a yaml '
                                 'scalar), e.g. config.total_env_steps=1000000 (repeatable).')
_DRY_RUN = flags.DEFINE_bool('dry_run', False, 'Print the trials\' commands, run nothing.')


def _fixed(items):
  out = {'config.wandb.mode': 'offline'}
  for item in items:
    name, sep, value = item.partition('=')
    if not sep or not name:
      raise app.UsageError(f'--set={item}: give NAME=VALUE, e.g. config.learning_rate=3e-4')
    out[name] = yaml.safe_load(value)
  return out


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  fixed = _fixed(_SET.value)
  try:
    sweep = sweep_lib.load(_SWEEP.value)
    method = _METHOD.value or sweep.get('method')
    planned = sweep_lib.trials(sweep, method, _TRIALS.value, _SEED.value, fixed)
    if _DRY_RUN.value:
      for i, params in enumerate(planned):
        print(' '.join(sweep_lib.command(sweep, params, f'{_DIR.value}/trial_{i}')[1:]))
      return
    record = sweep_lib.prepare(_DIR.value, _SWEEP.value, planned, method)
    sweep_lib.run(_DIR.value, sweep, record)
  except (sweep_lib.SweepError, OSError) as e:
    cli.fail(str(e))
  except KeyboardInterrupt:
    print(f'stopped; the same command resumes the sweep in {_DIR.value}', file=sys.stderr)
    sys.exit(130)
  metric = sweep['metric']
  rows = sweep_lib.results(_DIR.value, record, metric['name'])
  print('\n'.join(sweep_lib.table(rows, metric['name'], metric['goal'])))
  failed = [r['name'] for r in rows if r['status'] == 'failed']
  if failed:   # 1: trials failed (their run folders say why; the same command reruns them)
    sys.exit(f'error: {len(failed)} trial(s) failed: {", ".join(failed)}')


if __name__ == '__main__':
  flags.mark_flags_as_required(['sweep', 'dir'])
  cli.run(main)
