"""Population-based training (Jaderberg et al. 2017) of any config, on Ray Tune.

  python launch/pbt.py --config=configs/cartpole.py --population=4
  python launch/pbt.py --config=configs/atari_single.py:game=Pong --address=auto

Each member is a normal run folder, `<workdir>/members/member_NNNNN/`
(lock, checkpoints, metrics.jsonl, TensorBoard files, config.json). Every
`pbt.interval_env_steps` a member saves a checkpoint and reports its score
(configs/pbt.py says which); Ray Tune's PopulationBasedTraining then has
the bottom quantile copy a top member: its orbax checkpoint (params,
PopArt statistics, optimiser state, counters) goes into the copier's run
folder, and the copier's hyperparameters are the donor's, perturbed
(x0.8 or x1.2, or redrawn from the range) and kept in range. Both
members' metrics.jsonl record the copy. The learner's hyperparameters are
inputs of the compiled update (rl/optimizers.py), so a new value costs no
recompilation within a member.

Without --address Ray starts on this machine with its CPUs: members run
`CPUs / pbt.cpus_per_member` at a time, and the others wait their turn at
interval boundaries (PBT pauses a member that reported while others are
waiting). `--address=auto` (or host:port) joins an existing Ray cluster
(docs/pbt.md; SLURM there too). The same command with the same
--config.workdir resumes an interrupted population.

Writes `<workdir>/population.json` (each member's score, hyperparameters,
copies, failure) and `<workdir>/events.jsonl` (every copy). A member that
crashes is reported there and on the last lines; the others go on; the
exit status is then 1. A mistake in the settings stops it before any work
with one line naming the field (exit status 2).
"""

import os
import sys

from absl import app
from absl import flags

from configs import command_line
from configs import validation
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
    state = f'FAILED: {r["error"]}' if r['error'] else (
        f'score {r["score"]:.4g} at env step {r["env_steps"]:,}' if r['score'] is not None
        else 'no score')
    print(f'{r["member"]}: {state}; {values}; copied from {r["copied_from"] or "none"}',
          flush=True)
  print(f'{summary["copies"]} copies; best score {summary["best_score"]}; '
        f'{os.path.join(population_dir, population.SUMMARY)}', flush=True)
  for name in summary['failed']:
    print(f'error: {name} failed; the other members went on', file=sys.stderr, flush=True)
  if not summary['finished'] and not summary['failed']:
    print(f'stopped before total_env_steps; population.json says unfinished. The same command '
          'resumes it', file=sys.stderr, flush=True)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  config = command_line.load_config()
  try:
    summary, status = population.run_population(config, _POPULATION.value, _ADDRESS.value)
  except population.PopulationFinished as e:
    print(str(e), file=sys.stderr)
    sys.exit(0)
  except (validation.ConfigError, run_folder.RunFolderError, ray_cluster.ClusterError) as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)
  _print_summary(summary, os.path.abspath(config.workdir))
  sys.exit(status)


if __name__ == '__main__':
  flags.mark_flag_as_required('config')
  app.run(main, flags_parser=command_line.parse_flags)
