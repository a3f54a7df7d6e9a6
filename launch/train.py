"""Trains an IMPALA (+ PopArt) agent from an ml_collections config.

  python launch/train.py --config=configs/nethack_popart.py
  python launch/train.py --config=configs/atari_single.py:game=Pong,smoke
  python launch/train.py --config=configs/cartpole.py --config.learning_rate=1e-3

Several hosts: one process each, with JAX's own flags (or JAX_COORDINATOR_ADDRESS,
JAX_NUM_PROCESSES, JAX_PROCESS_ID; detected on SLURM) and one shared workdir:

  python launch/train.py --config=... --config.workdir=/shared/run \
      --coordinator_address=host0:1234 --num_processes=2 --process_id=0

Wires config -> processes -> validation -> run folder and logger -> Sebulba
trainer. A config mistake stops the run before any work with one line naming
the field; so does a wrong multi-process setting.
"""

import os
import signal
import sys
import threading
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'Experiment config: path/to/config.py[:variant,key=value]',
    lock_config=True)
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


def train(config):
  """Validates, trains and logs; returns (final learner state, workdir).

  Raises configs.validation.ConfigError before any work on a bad config, and
  agents.sebulba.NonFiniteError (after saving the last good state) when the
  learner's loss, gradient or PopArt statistics stop being finite. With
  several processes (jax.distributed initialised) every process calls it.
  """
  import jax
  from agents import multihost
  from agents.sebulba import NonFiniteError, Trainer
  from launch.run_logger import RunLogger, resolve_workdir

  multi = multihost.is_multiprocess()
  plan = _validate_everywhere(config)
  with config.unlocked():
    # Every process writes to and resumes from process 0's run folder.
    config.workdir = multihost.allgather_json(resolve_workdir(config))[0]
  logger = RunLogger(config.workdir, config, plan.task_names, primary=multihost.is_primary(),
                     process_index=jax.process_index())
  logger.message(f'run folder: {config.workdir}')
  trainer, state = None, None
  stop_requested = threading.Event()
  previous_handlers = _handle_signals(stop_requested, multi)
  multihost.on_peer_stop(lambda: (trainer and trainer.close(), logger.close()))
  try:
    trainer = Trainer(config, plan, stop_requested)
    if multi:
      logger.message(f'process {jax.process_index()} of {jax.process_count()}: '
                     f'{len(plan.learner_devices)} learner devices in all')
    if trainer.resumed_from is not None:
      logger.message(f'resuming from the checkpoint at env step {trainer.resumed_from:,}')
    state = trainer.run(logger.write)
    trainer.save_checkpoint()
    if multi:
      digest = trainer.check_replicas()
      logger.message(f'params digest {digest}: identical on all {len(plan.learner_devices)} '
                     f'learner devices of {jax.process_count()} processes')
    if trainer.interrupted:
      logger.message(f'interrupted at env step {trainer.env_steps:,}; '
                     f'checkpoint and metrics are in {config.workdir}')
  except KeyboardInterrupt:
    if trainer is not None:
      trainer.close()
      trainer.save_checkpoint()
      state = trainer.state
    logger.message(f'interrupted at env step {trainer.env_steps if trainer else 0:,}; '
                   f'checkpoint and metrics are in {config.workdir}')
  except Exception as e:
    if multi and not multihost.peer_stopping() and not isinstance(e, NonFiniteError):
      if isinstance(e, jax.errors.JaxRuntimeError):
        # A dead peer breaks the others' collectives (e.g. gloo's "connection
        # reset by peer"): the watchdog names it within its timeout.
        logger.message('a collective failed; waiting for the watchdog to tell which process stopped')
        multihost.await_verdict(config.distributed.timeout_seconds + 5)
      # Told before cleaning up, which may be slow: the others stop now, naming this one.
      multihost.announce_failure(f'{type(e).__name__}: {e}')
    raise
  finally:
    for sig, handler in previous_handlers.items():
      signal.signal(sig, handler)
    if trainer is not None:
      trainer.close()
    logger.close()
  return state, config.workdir


def _validate_everywhere(config):
  """validation.validate on every process; with several, a mistake found by
  any process (e.g. a device count of its own) stops all of them alike."""
  from agents import multihost
  from configs import validation
  try:
    plan, problem = validation.validate(config), None
  except validation.ConfigError as e:
    plan, problem = None, e
  if not multihost.is_multiprocess():
    if problem is not None:
      raise problem
    return plan
  problems = multihost.allgather_json(None if problem is None else [problem.field, str(problem)])
  for p, found in enumerate(problems):
    if found is not None:
      field, text = found
      raise validation.ConfigError(field, f'{text.split(": ", 1)[-1]} (found by process {p})')
  return plan


def _handle_signals(stop_requested: threading.Event, multi: bool):
  """SIGINT and SIGTERM stop a run cleanly (final checkpoint first); returns
  the previous handlers ({} off the main thread, where none can be set).

  The first signal sets `stop_requested`: the loop ends after the update in
  progress (with several processes, at the same update on all of them: the
  trainer's vote), and the run saves and exits 0. It does not raise: an
  exception raised from a handler lands wherever the main thread is, and
  where that is a callback whose exceptions Python ignores (JAX's gc
  callback, seen in CI) the stop was lost and the run trained on. SIGINT
  needs its handler set too: a process started in the background by a shell
  (`cmd &`, nohup) inherits SIGINT *ignored*, and `kill -INT` would then do
  nothing. A second signal does not wait for the update: one process raises
  KeyboardInterrupt (saved from where it lands), several exit at once."""
  if threading.current_thread() is not threading.main_thread():
    return {}

  def handler(signum, frame):
    if not stop_requested.is_set():
      stop_requested.set()
      return
    if not multi:
      raise KeyboardInterrupt(f'second signal {signum}')
    from agents import multihost
    print(f'error: second signal {signum}: exiting without a final checkpoint',
          file=sys.stderr, flush=True)
    multihost.exit_now(1)

  return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}


_USER_ERRORS = (flags.Error, AttributeError, KeyError, ValueError, TypeError, OSError)


def _exit_with_config_error(e: BaseException, argv) -> None:
  """One line naming the mistake instead of a traceback; exit status 2."""
  if isinstance(e, (AttributeError, KeyError)):  # override of a field the config lacks
    text = str(e).strip('\'"').replace("\\'", "'").replace('\\n', ' ')
    reason = f'unknown config field {text}'
  else:
    # config_flags embeds get_config's traceback; its last line is the reason.
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    reason = lines[-1] if lines else type(e).__name__
  overrides = ' '.join(a for a in argv[1:] if a.startswith('--config'))
  print(f'error: {reason} (in: {overrides or "no --config given"})', file=sys.stderr)
  sys.exit(2)


def parse_flags(argv):
  try:
    return flags.FLAGS(argv)
  except _USER_ERRORS as e:
    _exit_with_config_error(e, argv)


def _start_processes(config) -> None:
  """jax.distributed for a multi-process run (flags, JAX_* variables or a
  detected cluster); nothing for a single process. Exits with status 2 on a
  wrong setting, 1 when the processes cannot connect."""
  from agents import multihost
  from configs import validation
  try:
    spec = multihost.resolve(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  except multihost.DistributedError as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)
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
    multihost.exit_now(1)
  try:
    multihost.check_uniform_devices()
  except multihost.DistributedError as e:  # every process finds the same, and leaves
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)


def _fail(e: BaseException) -> None:
  """A run that stops on an error: its traceback (the actor's own for a dead
  actor), one last line naming it, exit status 1. With several processes the
  others were told already (train); when this process's watchdog is ending
  it because of a peer, the error is a consequence and is not reported."""
  import traceback
  from agents import multihost
  from agents.sebulba import ActorFailed, NonFiniteError
  if multihost.peer_stopping():
    while True:  # the watchdog prints the cause and exits
      time.sleep(1.0)
  if isinstance(e, ActorFailed) and e.__cause__ is not None:
    traceback.print_exception(e.__cause__)
  elif not isinstance(e, NonFiniteError):
    traceback.print_exception(e)
  print(f'error: {type(e).__name__}: {e}', file=sys.stderr, flush=True)
  if multihost.is_multiprocess() and not isinstance(e, NonFiniteError):
    multihost.leave(1)  # no shutdown barrier with peers that are stopping
  sys.exit(1)  # a non-finite stop is every process's: they leave together


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  from configs.validation import ConfigError
  logging.set_verbosity(logging.WARNING)
  warnings.filterwarnings('ignore', message='.*precision lowered by casting.*')
  try:
    config = _CONFIG.value
    config['seed']  # config_flags loads the file lazily: make it happen here
  except _USER_ERRORS as e:
    _exit_with_config_error(e, sys.argv)
  try:
    _start_processes(config)
    if _VALIDATE_ONLY.value:
      from configs.validation import validate
      plan = validate(config)
      print(config.to_json_best_effort(sort_keys=True))
      print(f'config OK: {plan.num_tasks} task(s), {plan.total_learner_steps:,} learner steps',
            file=sys.stderr)
      return
    train(config)
  except ConfigError as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)
  except Exception as e:  # noqa: BLE001 -- every failure ends in one line (and tells peers)
    _fail(e)


if __name__ == '__main__':
  flags.mark_flag_as_required('config')
  app.run(main, flags_parser=parse_flags)
