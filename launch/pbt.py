"""Population-based training (Jaderberg et al. 2017) of any config, on Ray Tune.

  python launch/pbt.py --config=configs/cartpole.py --population=4
  python launch/pbt.py --config=configs/atari_single.py:game=Pong --address=auto

Each member is a run folder under <workdir>/members/. Every
pbt.interval_env_steps a member reports its score (configs/pbt.py); the
bottom quantile copies a top member's checkpoint and its perturbed
hyperparameters (inputs of the compiled update: no recompilation).
Without --address Ray runs on this machine's CPUs; --address joins a
cluster (docs/pbt.md). The same command resumes an interrupted
population. Writes population.json and events.jsonl; exit status 1 when a
member crashed, 2 for a settings mistake.
"""

import os
import sys

from absl import app
from absl import flags

from configs import command_line
from configs import compose
from configs import validation
from infra import cli
from rundir import population
from rundir import ray_cluster
from rundir import run_folder

_POPULATION = flags.DEFINE_integer('population', None, 'Members (default: config.pbt.population)')
_ADDRESS = flags.DEFINE_string(
    'address', None, "An existing Ray cluster to run on ('auto' or host:port); unset: Ray "
    'starts on this machine')


def _print_summary(summary, population_dir):
  for r in summary['members']:
    values = ', '.join(f'{k}={v:.3g}' for k, v in r['values'].items() if v is not None)
    state = f'FAILED: {r["error"]}' if r['member'] in summary['failed'] else (
        f'score {r["score"]:.4g} at env step {r["env_steps"]:,}' if r['score'] is not None
        else 'no score')
    print(f'{r["member"]}: {state}; {values}; copied from {r["copied_from"] or "none"}',
          flush=True)
  print(f'{summary["copies"]} copies; best score {summary["best_score"]}; '
        f'{os.path.join(population_dir, population.SUMMARY)}', flush=True)
  for name in summary['failed']:
    print(f'error: {name} failed; the other members went on', file=sys.stderr, flush=True)
  for r in summary['members']:
    if r['member'] in summary['stopped']:
      print(r['error'], file=sys.stderr, flush=True)
  if not summary['finished'] and not summary['failed'] and not summary['stopped']:
    print(f'stopped before total_env_steps; population.json says unfinished. The same command '
          'resumes it', file=sys.stderr, flush=True)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  config = command_line.load_config()
  try:
    spec, settings = compose.population(config, _POPULATION.value)
    summary, status = population.run_population(spec, settings, _ADDRESS.value)
  except population.PopulationFinished as e:
    print(str(e), file=sys.stderr)
    sys.exit(0)
  except (validation.ConfigError, run_folder.RunFolderError, ray_cluster.ClusterError) as e:
    cli.fail(str(e))
  except population.PopulationStopped as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(1)
  _print_summary(summary, os.path.abspath(spec.run.workdir))
  sys.exit(status)


if __name__ == '__main__':
  flags.mark_flag_as_required('config')
  cli.run(main, command_line.parse_flags)
