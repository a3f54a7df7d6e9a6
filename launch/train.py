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

import signal
import sys
import threading
import time
import traceback
import warnings

# A stop asked for from the first second is kept: the command's handlers go
# in before anything slow is imported (train() installs its own when called
# as a library).
_STOP = threading.Event()


def _handle_signals(stop_requested: threading.Event, multi: bool):
  """SIGINT and SIGTERM stop a run cleanly (final checkpoint first); returns
  the previous handlers ({} off the main thread, where none can be set).

  The first signal sets `stop_requested`: the loop ends after the update in
  progress (with several processes, at the same update on all of them: the
  trainer's vote), and the run saves and exits 0; during start-up the run
  stops before its first update. It does not raise: an exception raised
  from a handler lands wherever the main thread is, and where that is a
  callback whose exceptions Python ignores (JAX's gc callback, seen in CI)
  the stop was lost and the run trained on; where it is half-built envs, a
  crash. SIGINT needs its handler set too: a process started in the
  background by a shell (`cmd &`, nohup) inherits SIGINT *ignored*, and
  `kill -INT` would then do nothing. A second signal does not wait for the
  update: one process raises KeyboardInterrupt (saved from where it lands),
  several exit at once."""
  if threading.current_thread() is not threading.main_thread():
    return {}

  def handler(signum, frame):
    if not stop_requested.is_set():
      stop_requested.set()
      return
    if not multi:
      raise KeyboardInterrupt(f'second signal {signum}')
    print(f'error: second signal {signum}: exiting without a final checkpoint',
          file=sys.stderr, flush=True)
    multihost.exit_now(1)

  return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}


if __name__ == '__main__':
  _handle_signals(_STOP, multi=False)

# Imported after the handlers are in: they take seconds (JAX, envs).
from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging  # noqa: E402
import jax  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from agents import checkpoint  # noqa: E402
from agents.trainer import ActorFailed, NonFiniteError, Trainer  # noqa: E402
from configs import resume, validation  # noqa: E402
from infra import multihost  # noqa: E402
from rundir import run_folder  # noqa: E402
from rundir.run_logger import MetricsWriteError, RunLogger  # noqa: E402

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


class RunStopped(RuntimeError):
  """The run stopped on a failure it reports in one line (exit status 1),
  after saving what it had."""


def train(config, stop_requested: threading.Event = None):
  """Validates, trains and logs; returns (final learner state, workdir)
  (state None when nothing was trained: a stop during start-up, a run
  already finished).

  Raises configs.validation.ConfigError before any work on a bad config,
  rundir.run_folder.RunFolderError before writing anything when the run
  folder cannot be used (a file, not writable, locked by another trainer,
  saved with another network or tasks), agents.trainer.NonFiniteError (after
  saving the last good state) when the learner's loss, gradient, PopArt
  statistics, parameters or optimiser state stop being finite, and
  RunStopped (after a checkpoint) when metrics.jsonl cannot be written. A
  first SIGINT or SIGTERM (or `stop_requested` set) ends the run after the
  update in progress with a checkpoint; during start-up, before the first
  update. With several processes (jax.distributed initialised) every
  process calls it.
  """
  multi = multihost.is_multiprocess()
  stop_requested = stop_requested or threading.Event()
  previous_handlers = _handle_signals(stop_requested, multi)
  logger = trainer = state = None
  try:  # what every process finds alike (no peer is told: each stops by itself)
    plan = validation.validate_everywhere(config)
    folder = run_folder.prepare(config)   # sets config.workdir
  except BaseException:
    _restore_handlers(previous_handlers)
    raise
  workdir, lock, resume_step = folder.workdir, folder.lock, folder.resume_step
  try:
    if resume_step is not None and resume_step >= config.total_env_steps:
      _say(f'{workdir} already finished at env step {resume_step:,} (total_env_steps '
           f'{config.total_env_steps:,}); nothing to do. Raise --config.total_env_steps to '
           'train on')
      return None, workdir
    pause = config.get('pause_at_env_steps', 0)
    if pause and resume_step is not None and resume_step >= pause:
      _say(f'{workdir} is at env step {resume_step:,}, at or past pause_at_env_steps '
           f'{pause:,}; nothing to do. Raise --config.pause_at_env_steps (or set it to 0) to '
           'train on')
      return None, workdir
    if _stop_agreed(stop_requested):
      _say('stopped during start-up, before training; nothing to save')
      return None, workdir
    _say(f'run folder: {workdir}')
    for note in folder.notes:
      _say(note)
    multihost.on_peer_stop(lambda: (trainer and trainer.close(), logger and logger.close()))
    # The trainer restores the checkpoint; only then is anything written
    # (config.json, metrics, rows and configs set aside): a resume that
    # cannot restore leaves the folder as it was.
    trainer = Trainer(config, plan, stop_requested)
    if multihost.is_primary():
      for note in run_folder.adopt(workdir, resume_step, folder.allowed):
        _say(note)
    logger = RunLogger(workdir, config, plan.task_names, primary=multihost.is_primary(),
                       process_index=jax.process_index(), resume_step=resume_step)
    _report_start(logger, trainer, plan, folder.allowed)
    state = _train_and_save(trainer, logger)
    if multi:
      digest = trainer.check_replicas()
      logger.message(f'params digest {digest}: identical on all {len(plan.learner_devices)} '
                     f'learner devices of {jax.process_count()} processes')
    if trainer.interrupted:
      logger.message(_interrupted_line(trainer, workdir))
    elif trainer.env_steps < config.total_env_steps:
      logger.message(f'paused at env step {trainer.env_steps:,} (pause_at_env_steps); '
                     f'{_saved_where(trainer)}; the same command with a larger '
                     '--config.pause_at_env_steps, or 0, goes on')
  except KeyboardInterrupt:  # a second signal, from wherever it landed
    if trainer is not None:
      trainer.close()
      _final_save(trainer)
      state = trainer.state
      _say(_interrupted_line(trainer, config.workdir))
    else:
      _say('interrupted during start-up, before the first update; nothing to save')
  except Exception as e:
    if multi:
      _tell_peers(e, config)
    raise
  finally:
    try:  # a second signal during the cleanup must not skip the rest of it
      for sig in previous_handlers:
        signal.signal(sig, signal.SIG_IGN)
      if trainer is not None:
        trainer.close()
      if logger is not None:
        logger.close()
      if lock is not None:
        lock.release()
    finally:
      _restore_handlers(previous_handlers)
  return state, config.workdir


def _report_start(logger, trainer, plan, allowed) -> None:
  """The run's first lines: the schedule a resume changed, the processes,
  where it resumes, the hyperparameters the config changed."""
  note = resume.schedule_note(allowed, trainer.version, trainer.schedule,
                              plan.env_steps_per_update)
  if note:
    _say(note)
  logger.message(plan.describe_actors())
  if multihost.is_multiprocess():
    logger.message(f'process {jax.process_index()} of {jax.process_count()}: '
                   f'{len(plan.learner_devices)} learner devices in all')
  if trainer.resumed_from is not None:
    logger.message(f'resuming from the checkpoint at env step {trainer.resumed_from:,}')
  if trainer.changed_hyperparameters:
    logger.message('learner hyperparameters from this config, not the checkpoint: ' + '; '.join(
        f'{key} {old:.4g} -> {new:.4g}'
        for key, (old, new) in sorted(trainer.changed_hyperparameters.items())))


def _train_and_save(trainer, logger):
  """Trains to the end (or a stop) and saves the last checkpoint; returns
  the learner state. metrics.jsonl failing to take a row stops the run with
  RunStopped, after a checkpoint where one process runs (with several,
  process 0 alone writes metrics: the others are told, no collective save)."""
  try:
    state = trainer.run(logger.write, until=trainer.config.get('pause_at_env_steps', 0) or None)
  except MetricsWriteError as e:
    trainer.close()
    if multihost.is_multiprocess():
      raise RunStopped(f'{e.strerror}; the checkpoints written so far are in '
                       f'{trainer.checkpointer.directory}') from None
    _final_save(trainer)
    raise RunStopped(f'{e.strerror}; {_saved_where(trainer)}') from None
  _final_save(trainer)
  return state


def _tell_peers(e: Exception, config) -> None:
  """Tells the other processes this one failed (unless they are stopping
  already, or the failure is a non-finite stop, which all share). A dead
  peer breaks the others' collectives (e.g. gloo's "connection reset by
  peer"): then the watchdog names it within its timeout."""
  if multihost.peer_stopping() or isinstance(e, NonFiniteError):
    return
  if isinstance(e, jax.errors.JaxRuntimeError):
    _say('a collective failed; waiting for the watchdog to tell which process stopped')
    multihost.await_verdict(config.distributed.timeout_seconds + 5)
  # Told before cleaning up, which may be slow: the others stop now, naming this one.
  multihost.announce_failure(f'{type(e).__name__}: {e}')


def _restore_handlers(previous) -> None:
  for sig, handler in previous.items():
    signal.signal(sig, handler)


def _stop_agreed(stop_requested: threading.Event) -> bool:
  """Whether any process was asked to stop (all of them then stop alike)."""
  return bool(multihost.allgather_ints([stop_requested.is_set()])[:, 0].any())


def _final_save(trainer) -> None:
  """The last checkpoint, where this process trained at all (a stop before
  the first update leaves the folder's checkpoints as they were)."""
  if trainer.env_steps > trainer.start_env_steps:
    trainer.save_checkpoint()


def _say(text: str) -> None:
  prefix = '' if jax.process_index() == 0 else f'[process {jax.process_index()}] '
  print(prefix + text, file=sys.stderr, flush=True)


def _saved_where(trainer) -> str:
  """Where the newest checkpoint on disk is (a final one that failed
  verification was set aside and is not it)."""
  steps = trainer.checkpointer.steps()
  if not steps:
    return 'no checkpoint was written'
  return f'the checkpoint at env step {steps[-1]:,} is in {trainer.checkpointer.directory}'


def _interrupted_line(trainer, workdir: str) -> str:
  """The last line of a stopped run, true to what is on disk."""
  if trainer.env_steps == trainer.start_env_steps:
    return f'stopped before the first update; nothing new to save ({_saved_where(trainer)})'
  return (f'interrupted at env step {trainer.env_steps:,}; {_saved_where(trainer)} and the '
          f'metrics in {run_folder.metrics_path(workdir)}')


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
  if multihost.peer_stopping():
    while True:  # the watchdog prints the cause and exits
      time.sleep(1.0)
  one_line = (NonFiniteError, RunStopped)  # they say all there is to say
  if isinstance(e, ActorFailed) and e.__cause__ is not None:
    traceback.print_exception(e.__cause__)
  elif not isinstance(e, one_line):
    traceback.print_exception(e)
  print(f'error: {type(e).__name__}: {e}', file=sys.stderr, flush=True)
  if multihost.is_multiprocess() and not isinstance(e, NonFiniteError):
    multihost.leave(1)  # no shutdown barrier with peers that are stopping
  sys.exit(1)  # a non-finite stop is every process's: they leave together


def load_config():
  """The --config flag's config, loaded, with quiet logs; a mistake in it
  exits with one line (status 2). Shared with launch/pbt.py."""
  logging.set_verbosity(logging.WARNING)
  warnings.filterwarnings('ignore', message='.*precision lowered by casting.*')
  try:
    config = _CONFIG.value
    config['seed']  # config_flags loads the file lazily: make it happen here
  except _USER_ERRORS as e:
    _exit_with_config_error(e, sys.argv)
  return config


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  config = load_config()
  try:
    _start_processes(config)
    if _VALIDATE_ONLY.value:
      plan = validation.validate(config)
      print(config.to_json_best_effort(sort_keys=True))
      print(f'config OK: {plan.num_tasks} task(s), {plan.total_learner_steps:,} learner steps',
            file=sys.stderr)
      print(plan.describe_actors(), file=sys.stderr)
      return
    train(config, _STOP)
    # The run's last line is out: a signal now would only break the exit
    # (a KeyboardInterrupt traceback from an atexit callback).
    for sig in (signal.SIGINT, signal.SIGTERM):
      signal.signal(sig, signal.SIG_IGN)
    if multihost.is_multiprocess():
      multihost.finish(0)  # not JAX's exit-time shutdown: it aborted process 1 now and then
  except (validation.ConfigError, run_folder.RunFolderError, checkpoint.CheckpointError) as e:
    print(f'error: {e}', file=sys.stderr)
    if multihost.is_multiprocess():
      multihost.leave(2)  # peers may be stopping: no shutdown barrier with them
    sys.exit(2)
  except Exception as e:  # noqa: BLE001 -- every failure ends in one line (and tells peers)
    _fail(e)


if __name__ == '__main__':
  flags.mark_flag_as_required('config')
  app.run(main, flags_parser=parse_flags)
