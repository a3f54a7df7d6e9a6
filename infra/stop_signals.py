"""SIGINT and SIGTERM as a request to stop a run cleanly (final checkpoint
first). Imports nothing slow, so a command installs it in its first second.

The first signal sets `stop_requested`: the run ends after the update in progress, saves and exits
0. The handler never raises, because a raise lands wherever the main thread is (a callback whose
exceptions Python ignores, or half-built envs). SIGINT is set too, as a background process inherits
it ignored.
"""

import contextlib
import signal
import sys
import threading
from typing import Callable, Dict

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def install(stop_requested: threading.Event, multi: bool) -> Dict[int, Callable]:
  """Installs the SIGINT and SIGTERM handlers and returns the previous ones
  {signal number: handler} for `restore`; off the main thread, does nothing.

  Args:
    multi: several processes: a second signal exits 1 at once instead of raising KeyboardInterrupt.
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
  """Ignores SIGINT and SIGTERM from now on (a cleanup that must not be cut short)."""
  for sig in SIGNALS:
    signal.signal(sig, signal.SIG_IGN)


def restore(previous: Dict[int, Callable]) -> None:
  """Puts back the handlers `install` returned."""
  for sig, handler in previous.items():
    signal.signal(sig, handler)


@contextlib.contextmanager
def forwarded(from_signal: int, to_signal: int):
  """During the block, `from_signal` to this process raises `to_signal` instead.

  For Ray Tune, which stops cleanly on SIGUSR1 but not on SIGTERM. Off the
  main thread, does nothing.
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  previous = signal.signal(from_signal, lambda *_: signal.raise_signal(to_signal))
  try:
    yield
  finally:
    signal.signal(from_signal, previous if previous is not None else signal.SIG_DFL)
