"""Trains an IMPALA (+ PopArt) agent from an ml_collections config.

  python launch/train.py --config=configs/nethack_popart.py
  python launch/train.py --config=configs/cartpole.py --config.learning_rate=1e-3

Several hosts: one process each with JAX's flags (--coordinator_address,
--num_processes, --process_id; or JAX_* variables, or SLURM) and one
shared workdir (docs/multihost.md). A config or multi-process mistake
stops the run before any work with one line naming it.
"""

import threading

from infra import cli
from infra import stop_signals  # imports nothing slow

# A stop asked for from the first second is kept: the handlers go in before
# anything slow is imported.
_STOP = threading.Event()
if __name__ == '__main__':
  stop_signals.install(_STOP, multi=False)

# Imported after the handlers are in: they take seconds (JAX, envs).
import sys  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

from agents import checkpoint  # noqa: E402
from configs import command_line, pbt, validation  # noqa: E402
from infra import multihost, peer_watch  # noqa: E402
from rundir import lifecycle, population_record as record, run_folder  # noqa: E402

_VALIDATE_ONLY = flags.DEFINE_bool(
    'validate_only', False, 'Check the config (and overrides), print it as JSON and exit.')
# JAX's own names (jax.distributed.initialize); unset: a single process.
_COORDINATOR = flags.DEFINE_string(
    'coordinator_address', None, 'host:port of process 0, reachable from every host '
    '(default: $JAX_COORDINATOR_ADDRESS)')
_NUM_PROCESSES = flags.DEFINE_integer(
    'num_processes', None, 'Processes in the run, one per host (default: $JAX_NUM_PROCESSES)')
_PROCESS_ID = flags.DEFINE_integer(
    'process_id', None, 'This process, 0..num_processes-1 (default: $JAX_PROCESS_ID)')


def _start_processes(config) -> None:
  """jax.distributed for a multi-process run; nothing for a single process.
  Exits with status 2 on a wrong setting, 1 when the processes cannot connect."""
  try:
    spec = multihost.resolve(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  except multihost.DistributedError as e:
    cli.fail(str(e))
  if spec is None:
    return
  validation.check_distributed(config)
  try:
    multihost.initialize(spec, config.distributed.timeout_seconds,
                         config.distributed.connect_timeout_seconds)
  except Exception as e:  # noqa: BLE001 -- JAX raises several kinds here
    first = str(e).strip().splitlines()[0] if str(e).strip() else ''
    print(f'error: could not start the distributed runtime (from {spec.source}: coordinator '
          f'{spec.coordinator_address}, process {spec.process_id} of {spec.num_processes}): '
          f'{type(e).__name__}: {first}', file=sys.stderr)
    peer_watch.exit_now(1)
  try:
    multihost.check_uniform_devices()
  except multihost.DistributedError as e:  # every process finds the same, and leaves
    cli.fail(str(e))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  config = command_line.load_config()
  try:
    values = record.read_values(config.workdir) if config.workdir else None
    if values:   # a PBT member finished alone keeps its own hyperparameters
      pbt.apply(config, values)
      print(f'{config.workdir} is a population member: ' + ', '.join(
          f'{k}={v:.3g}' for k, v in values.items()) + f' from its {record.VALUES}',
            file=sys.stderr)
    _start_processes(config)
    if _VALIDATE_ONLY.value:
      plan = validation.validate(config)
      print(config.to_json_best_effort(sort_keys=True))
      print(f'config OK: {plan.num_tasks} task(s), {plan.total_learner_steps:,} learner steps',
            file=sys.stderr)
      print(plan.describe_actors(), file=sys.stderr)
      return
    # The composition root: past this line only the RunSpec travels.
    lifecycle.train(validation.validate_everywhere(config), _STOP)
    # The run's last line is out: a signal now would only break the exit
    # (a KeyboardInterrupt traceback from an atexit callback).
    stop_signals.ignore()
    if multihost.is_multiprocess():
      peer_watch.finish(0)  # not JAX's exit-time shutdown: it aborted process 1 now and then
  except (validation.ConfigError, run_folder.RunFolderError, checkpoint.CheckpointError) as e:
    print(f'error: {e}', file=sys.stderr)
    if multihost.is_multiprocess():
      peer_watch.leave(2)  # peers may be stopping: no shutdown barrier with them
    sys.exit(2)
  except Exception as e:  # noqa: BLE001 -- every failure ends in one line (and tells peers)
    lifecycle.exit_on_failure(e)


if __name__ == '__main__':
  flags.mark_flag_as_required('config')
  cli.run(main, command_line.parse_flags)
