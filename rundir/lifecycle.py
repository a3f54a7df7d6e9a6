"""A run's life: its folder prepared and locked, the trainer built (restoring the checkpoint), the
folder adopted, the logger open, trained, saved, closed. It receives the validated RunSpec
(configs/spec.py), never the ml_collections config. `train` lives it whole for launch/train.py; a
population member (rundir/population.py) opens a `Run` and trains it interval by interval."""

import sys
import threading
import time
import traceback
from typing import Callable, List, Optional

import jax

from agents.trainer import ActorFailed, Trainer
from agents.update_checks import NonFiniteError, TaskIdError
from configs import resume
from configs import spec as spec_lib
from configs.spec import RunSpec
from infra import multihost
from infra import peer_watch
from infra import stop_signals
from rundir import run_folder
from rundir.run_logger import MetricsWriteError, RunLogger


class RunStopped(RuntimeError):
  """A failure the run reports in one line (exit status 1), after saving what it had."""


class Run:
  """One run folder opened for training.

  The constructor prepares the folder of a spec validated on every process
  (validation.validate_everywhere: a collective): it resolves the workdir and takes the lock,
  raising RunFolderError before anything is written. `start()` builds the trainer, which restores
  the checkpoint; only then is anything written, so a failed restore leaves the folder as it was.
  """

  def __init__(self, spec: RunSpec, stop_requested: Optional[threading.Event] = None):
    folder = run_folder.prepare(spec)
    self.workdir, self.lock, self.resume_step = folder.workdir, folder.lock, folder.resume_step
    self.spec = spec_lib.with_workdir(spec, folder.workdir)
    self.plan = self.spec.plan
    self.notes: List[str] = list(folder.notes)
    self._allowed = folder.allowed
    self._stop_requested = stop_requested
    self.trainer = self.logger = None

  def nothing_to_do(self) -> Optional[str]:
    """Why the run has nothing to train (its resume step is at or past
    total_env_steps or pause_at_env_steps), naming the field to raise; or None."""
    run, step = self.spec.run, self.resume_step
    if step is not None and step >= run.total_env_steps:
      return (f'{self.workdir} already finished at env step {step:,} (total_env_steps '
              f'{run.total_env_steps:,}); nothing to do. Raise --config.total_env_steps to '
              'train on')
    pause = run.pause_at_env_steps
    if pause and step is not None and step >= pause:
      return (f'{self.workdir} is at env step {step:,}, at or past pause_at_env_steps '
              f'{pause:,}; nothing to do. Raise --config.pause_at_env_steps (or set it to 0) to '
              'train on')
    return None

  def start(self) -> List[str]:
    """Builds the trainer (restoring the checkpoint), adopts the folder (primary
    process) and opens the logger; returns the adoption's notes."""
    self.trainer = Trainer(self.spec, self._stop_requested)
    notes = []
    if multihost.is_primary():
      notes = run_folder.adopt(self.workdir, self.resume_step, self._allowed)
    self.logger = RunLogger(self.workdir, self.spec, self.plan.task_names,
                            primary=multihost.is_primary(), process_index=jax.process_index(),
                            resume_step=self.resume_step)
    return notes

  @property
  def env_steps(self) -> int:
    return self.trainer.env_steps

  def schedule_note(self) -> Optional[str]:
    """How a resume changed the learning-rate schedule (a line), or None (needs `start()`)."""
    return resume.schedule_note(self._allowed, self.trainer.version, self.trainer.schedule,
                                self.plan.env_steps_per_update,
                                float(self.spec.optimizer.anneal_to),
                                float(self.spec.run.learning_rate))

  def start_lines(self) -> List[str]:
    """The run's first log lines (needs `start()`): actors, processes, the resume
    step, and hyperparameters taken from this config rather than the checkpoint."""
    trainer, plan = self.trainer, self.plan
    lines = [plan.describe_actors()]
    if multihost.is_multiprocess():
      lines.append(f'process {jax.process_index()} of {jax.process_count()}: '
                   f'{len(plan.learner_devices)} learner devices in all')
    if trainer.resumed_from is not None:
      lines.append(f'resuming from the checkpoint at env step {trainer.resumed_from:,}')
    if trainer.changed_hyperparameters:
      lines.append('learner hyperparameters from this config, not the checkpoint: ' + '; '.join(
          f'{key} {old:.4g} -> {new:.4g}'
          for key, (old, new) in sorted(trainer.changed_hyperparameters.items())))
    return lines

  def train(self, until: Optional[int] = None, on_log: Optional[Callable] = None):
    """Trains to `until` (None: pause_at_env_steps, else the end), writing every
    log row and handing it to `on_log`, then saves a checkpoint.

    Raises:
      RunStopped: metrics.jsonl cannot be written; with one process a checkpoint is saved first
        (with several, only process 0 writes metrics, so there is no collective save).
    """
    if until is None:
      until = self.spec.run.pause_at_env_steps or None

    def log(metrics):
      self.logger.write(metrics)
      if on_log is not None:
        on_log(metrics)

    trainer = self.trainer
    try:
      state = trainer.run(log, until=until)
    except MetricsWriteError as e:
      trainer.close()
      if multihost.is_multiprocess():
        raise RunStopped(f'{e.strerror}; the checkpoints written so far are in '
                         f'{trainer.checkpointer.directory}') from None
      self.save()
      raise RunStopped(f'{e.strerror}; {self.saved_where()}') from None
    self.save()
    return state

  def save(self) -> None:
    """Saves the last checkpoint, only if this process trained at all."""
    if self.trainer.env_steps > self.trainer.start_env_steps:
      self.trainer.save_checkpoint()

  def saved_where(self) -> str:
    """'the checkpoint at env step <n> is in <dir>' for the newest checkpoint on
    disk (not one set aside), or 'no checkpoint was written'."""
    steps = self.trainer.checkpointer.steps()
    if not steps:
      return 'no checkpoint was written'
    return f'the checkpoint at env step {steps[-1]:,} is in {self.trainer.checkpointer.directory}'

  def interrupted_line(self) -> str:
    """The last line of a stopped run, true to what is on disk."""
    trainer = self.trainer
    if trainer.env_steps == trainer.start_env_steps:
      return f'stopped before the first update; nothing new to save ({self.saved_where()})'
    return (f'interrupted at env step {trainer.env_steps:,}; {self.saved_where()} and the '
            f'metrics in {run_folder.metrics_path(self.workdir)}')

  def close(self) -> None:
    """Stops the actors, closes the logger, releases the folder's lock; idempotent."""
    trainer, logger, lock = self.trainer, self.logger, self.lock
    self.trainer = self.logger = self.lock = None
    if trainer is not None:
      trainer.close()
    if logger is not None:
      logger.close()
    if lock is not None:
      lock.release()


def train(spec: RunSpec, stop_requested: Optional[threading.Event] = None):
  """Runs a whole training run; returns (final learner state or None when
  nothing was trained, workdir). Progress goes to stderr.

  A first SIGINT or SIGTERM (or `stop_requested`) stops after the current update and saves; a second
  saves what the trainer has and returns. Every process calls it; one that fails tells the others.

  Raises:
    rundir.run_folder.RunFolderError: before writing anything.
    agents.update_checks.NonFiniteError: after saving the last good state.
    RunStopped: after a checkpoint, when metrics.jsonl cannot be written.
  """
  multi = multihost.is_multiprocess()
  stop_requested = stop_requested or threading.Event()
  previous_handlers = stop_signals.install(stop_requested, multi)
  try:  # what every process finds alike (no peer is told: each stops by itself)
    run = Run(spec, stop_requested)
  except BaseException:
    stop_signals.restore(previous_handlers)
    raise
  state = None
  try:
    nothing = run.nothing_to_do()
    if nothing:
      _say(nothing)
      return None, run.workdir
    if _stop_agreed(stop_requested):
      _say('stopped during start-up, before training; nothing to save')
      return None, run.workdir
    _say(f'run folder: {run.workdir}')
    for note in run.notes:
      _say(note)
    peer_watch.on_peer_stop(lambda: (run.trainer and run.trainer.close(),
                                    run.logger and run.logger.close()))
    for note in run.start():
      _say(note)
    note = run.schedule_note()
    if note:
      _say(note)
    for line in run.start_lines():
      run.logger.message(line)
    state = run.train()
    trainer = run.trainer
    if multi:
      digest = trainer.check_replicas()
      run.logger.message(f'params digest {digest}: identical on all '
                         f'{len(run.plan.learner_devices)} learner devices of '
                         f'{jax.process_count()} processes')
    if trainer.interrupted:
      run.logger.message(run.interrupted_line())
    elif trainer.env_steps < spec.run.total_env_steps:
      run.logger.message(f'paused at env step {trainer.env_steps:,} (pause_at_env_steps); '
                         f'{run.saved_where()}; the same command with a larger '
                         '--config.pause_at_env_steps, or 0, goes on')
  except KeyboardInterrupt:  # a second signal, from wherever it landed
    if run.trainer is not None:
      run.trainer.close()
      run.save()
      state = run.trainer.state
      _say(run.interrupted_line())
    else:
      _say('interrupted during start-up, before the first update; nothing to save')
  except Exception as e:
    if multi:
      _tell_peers(e, spec)
    raise
  finally:
    try:  # a second signal during the cleanup must not skip the rest of it
      if previous_handlers:
        stop_signals.ignore()
      run.close()
    finally:
      stop_signals.restore(previous_handlers)
  return state, run.workdir


def exit_on_failure(e: BaseException) -> None:
  """Ends the process (status 1) for a run that stopped on `e`; never returns.

  Prints the traceback (the actor's own for a dead actor; none for the one-line errors), then
  'error: <type>: <message>'. When the watchdog is ending this process for a peer, `e` is a
  consequence: it waits for the watchdog instead.
  """
  if peer_watch.peer_stopping():
    while True:  # the watchdog prints the cause and exits
      time.sleep(1.0)
  one_line = (NonFiniteError, RunStopped, TaskIdError)  # they say all there is to say
  if isinstance(e, ActorFailed) and e.__cause__ is not None:
    traceback.print_exception(e.__cause__)
  elif not isinstance(e, one_line):
    traceback.print_exception(e)
  print(f'error: {type(e).__name__}: {e}', file=sys.stderr, flush=True)
  if multihost.is_multiprocess():
    if isinstance(e, NonFiniteError):
      # Every process stops on it: they leave together, process 0 last, and
      # not through JAX's exit-time shutdown, which could abort a process.
      peer_watch.finish(1)
    peer_watch.leave(1)  # no shutdown barrier with peers that are stopping
  sys.exit(1)


def _tell_peers(e: Exception, spec: RunSpec) -> None:
  """Tells the other processes this one failed, unless they are stopping or it is a non-finite stop
  (all share it). After a failed collective it first lets the watchdog name a dead peer."""
  if peer_watch.peer_stopping() or isinstance(e, NonFiniteError):
    return
  if isinstance(e, jax.errors.JaxRuntimeError):
    _say('a collective failed; waiting for the watchdog to tell which process stopped')
    peer_watch.await_verdict(spec.distributed.timeout_seconds + 5)
  # Told before cleaning up, which may be slow: the others stop now, naming this one.
  peer_watch.announce_failure(f'{type(e).__name__}: {e}')


def _stop_agreed(stop_requested: threading.Event) -> bool:
  """Whether any process was asked to stop (all of them then stop alike)."""
  return bool(multihost.allgather_ints([stop_requested.is_set()])[:, 0].any())


def _say(text: str) -> None:
  prefix = '' if jax.process_index() == 0 else f'[process {jax.process_index()}] '
  print(prefix + text, file=sys.stderr, flush=True)
