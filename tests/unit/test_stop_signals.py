"""infra/stop_signals.py: the first SIGINT or SIGTERM asks the run to stop,
the second interrupts; the previous handlers come back."""

import os
import signal
import threading

import pytest

from infra import stop_signals


@pytest.mark.parametrize('sig', [signal.SIGINT, signal.SIGTERM])
def test_first_signal_asks_to_stop_and_the_second_interrupts(sig):
  before = {s: signal.getsignal(s) for s in stop_signals.SIGNALS}
  stop = threading.Event()
  previous = stop_signals.install(stop, multi=False)
  try:
    os.kill(os.getpid(), sig)
    assert stop.is_set()
    with pytest.raises(KeyboardInterrupt, match=f'second signal {int(sig)}'):
      os.kill(os.getpid(), sig)
  finally:
    stop_signals.restore(previous)
  assert {s: signal.getsignal(s) for s in stop_signals.SIGNALS} == before


def test_off_the_main_thread_nothing_is_installed():
  got = []
  thread = threading.Thread(target=lambda: got.append(stop_signals.install(threading.Event(), False)))
  thread.start()
  thread.join()
  assert got == [{}]
