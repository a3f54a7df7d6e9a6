"""SIGINT and SIGTERM as a request to stop a run cleanly (final checkpoint
first). Imports nothing slow, so that a command can install the handlers
in its first second, before JAX and the envs load.

The first signal sets the run's `stop_requested` event: the loop ends after
the update in progress (with several processes, at the same update on all
of them: the trainer's vote), and the run saves and exits 0; during
start-up it stops before its first update. The handler does not raise: an
exception raised from a handler lands wherever the main thread is, and
where that is a callback whose exceptions Python ignores (JAX's gc
callback) the stop would be lost and the run would train on; where it is
half-built envs, a crash. SIGINT needs its handler set too: a process
started in the background by a shell (`cmd &`, nohup) inherits SIGINT
*ignored*, and `kill -INT` would then do nothing. A second signal does not
wait for the update: one process raises KeyboardInterrupt (the run saves
from where it lands), several exit at once with status 1.
"""

import contextlib
import signal
import sys
import threading
from typing import Callable, Dict

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def install(stop_requested: threading.Event, multi: bool) -> Dict[int, Callable]:
  """Installs the SIGINT and SIGTERM handlers (see the module docstring).

  Off the main thread, where no handler can be set, does nothing.

  Args:
    stop_requested: the run's event; the first signal sets it.
    multi: the run has several processes: a second signal exits at once
      with status 1 (peer_watch.exit_now) instead of raising
      KeyboardInterrupt.

  Returns:
    The previous handlers {signal number: handler}, for `restore`; {} off
    the main thread.
  """
  if threading.current_thread() is not threading.main_thread():
    return {}

  def handler(signum, frame):
    del frame
    if not stop_requested.is_set():
      stop_requested.set()
      return
    if not multi:
      raise KeyboardInterrupt(f'second signal {signum}')
    print(f'error: second signal {signum}: exiting without a final checkpoint',
          file=sys.stderr, flush=True)
    from infra import peer_watch  # pylint: disable=import-outside-toplevel
    peer_watch.exit_now(1)

  return {sig: signal.signal(sig, handler) for sig in SIGNALS}


def ignore() -> None:
  """Ignores SIGINT and SIGTERM from now on (a cleanup that must not be cut
  short; a run whose last line is out). Call it on the main thread."""
  for sig in SIGNALS:
    signal.signal(sig, signal.SIG_IGN)


def restore(previous: Dict[int, Callable]) -> None:
  """Puts back the handlers `install` returned.

  Args:
    previous: {signal number: handler}, as `install` returned it.
  """
  for sig, handler in previous.items():
    signal.signal(sig, handler)


@contextlib.contextmanager
def forwarded(from_signal: int, to_signal: int):
  """During the block, `from_signal` to this process raises `to_signal` in it.

  For a library that stops cleanly on one signal but not on another: Ray
  Tune ends a run (trials saved, the experiment state written) on SIGUSR1,
  while SIGTERM would end the driver at once. Off the main thread, where no
  handler can be set, does nothing.

  Args:
    from_signal: the signal to forward (signal.SIGTERM).
    to_signal: the signal raised instead (signal.SIGUSR1).
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  previous = signal.signal(from_signal, lambda *_: signal.raise_signal(to_signal))
  try:
    yield
  finally:
    signal.signal(from_signal, previous if previous is not None else signal.SIG_DFL)
