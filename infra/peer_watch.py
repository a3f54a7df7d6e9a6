"""How the processes of one run watch each other and leave together.

Every process beats in JAX's coordination key-value store; `Watchdog` stops a process with one line
naming the peer that died or failed, instead of a wait forever on a collective. `announce_failure`,
`leave`, `finish` and `exit_now` end a process so that its peers know why.
"""

import os
import sys
import threading
import time
from typing import Callable, List, Optional

import jax

_KEY = 'popart_impala'       # key-value store prefix of this project
BEAT_SECONDS = 1.0           # heartbeat period of every process
BYE_SECONDS = 60.0           # how long process 0 waits for the others to leave first


def _client():
  from jax._src import distributed  # the coordination service's key-value store
  client = distributed.global_state.client
  if client is None:
    raise RuntimeError('jax.distributed is not initialised')
  return client


_watchdog: Optional['Watchdog'] = None


def start_watchdog(timeout_seconds: float) -> None:
  """Starts this process's watchdog (call right after initialisation); later calls do nothing."""
  global _watchdog
  if _watchdog is None:
    _watchdog = Watchdog(timeout_seconds)
    _watchdog.start()


def on_peer_stop(cleanup: Callable[[], None]) -> None:
  """Registers `cleanup` to run (bounded in time) before the watchdog ends this process."""
  if _watchdog is not None:
    _watchdog.cleanups.append(cleanup)


def peer_stopping() -> bool:
  """True once the watchdog is ending this process: later errors are consequences, not causes."""
  return _watchdog is not None and _watchdog.stopping.is_set()


def await_verdict(seconds: float) -> None:
  """Gives the watchdog `seconds` to find a dead peer (and end the process)."""
  if _watchdog is not None:
    _watchdog.join(timeout=seconds)


def announce_failure(message: str) -> None:
  """Tells the other processes this one is stopping on `message` (first 2000
  characters); they stop too, and this watchdog judges no peer from then on."""
  if _watchdog is not None:
    _watchdog.standing_down.set()
  try:
    _client().key_value_set(f'{_KEY}/failed/{jax.process_index()}', message[:2000],
                            allow_overwrite=True)
  except Exception:  # the coordinator may be gone already
    pass


def leave(code: int) -> None:
  """Ends a process that stops on an error, without JAX's shutdown barrier; does not return.

  Process 0 hosts the store every process needs, so it leaves last: it waits
  (at most BYE_SECONDS) for every other's goodbye or death.
  """
  try:
    client, me = _client(), jax.process_index()
    client.key_value_set(f'{_KEY}/bye/{me}', '1', allow_overwrite=True)
    if me == 0:
      gone = _watchdog.silent if _watchdog is not None else set()
      deadline = time.monotonic() + BYE_SECONDS
      while time.monotonic() < deadline:
        byes = {_process_of(k) for k, _ in client.key_value_dir_get(f'{_KEY}/bye/')}
        if set(range(jax.process_count())) <= byes | gone:
          time.sleep(0.5)  # each leaves right after its goodbye: let it be gone first
          break
        time.sleep(0.2)
  except Exception:
    pass
  exit_now(code)


def finish(code: int = 0) -> None:
  """Ends a process of a finished multi-process run; every process calls it; does not return.

  Skips JAX's exit-time shutdown, which can abort a process. A process still
  connected when process 0 goes is aborted by JAX, so the others wait (at most
  BYE_SECONDS) for process 0's "done" (after its cleanup), then `leave`.
  """
  try:
    client, me = _client(), jax.process_index()
    if me == 0:
      client.key_value_set(f'{_KEY}/done/0', '1', allow_overwrite=True)
    else:
      deadline = time.monotonic() + BYE_SECONDS
      while time.monotonic() < deadline:
        if client.key_value_dir_get(f'{_KEY}/done/'):
          break
        time.sleep(0.1)
  except Exception:  # process 0 gone already: nothing to wait for
    pass
  leave(code)


def exit_now(code: int) -> None:
  """Flushes stdout and stderr, then os._exit(code): no atexit, no finally; does not return."""
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)


def _process_of(key: str) -> int:
  return int(key.rsplit('/', 1)[1])


class Watchdog(threading.Thread):
  """Beats for this process and watches the others' (a daemon thread).

  Ends the process (status 1, one line naming the peer) when a peer announces a failure or stays
  silent over `timeout_seconds`, or the coordinator stays unreachable that long; runs the cleanups
  (at most CLEANUP_SECONDS) first. Beats come from this thread, so a long compile is not silence.
  """
  CLEANUP_SECONDS = 20.0

  def __init__(self, timeout_seconds: float, beat_seconds: float = BEAT_SECONDS):
    super().__init__(name='multihost-watchdog', daemon=True)
    self._timeout, self._beat = timeout_seconds, beat_seconds
    self._me, self._n = jax.process_index(), jax.process_count()
    self.cleanups: List[Callable[[], None]] = []
    self.stopping = threading.Event()       # this watchdog is ending the process
    self.standing_down = threading.Event()  # this process failed itself: judge no peer
    self.silent: set = set()                # peers found dead (no goodbye to wait for)

  def run(self) -> None:
    client = _client()
    beat = 0
    heard = {p: (None, time.monotonic()) for p in range(self._n) if p != self._me}
    unreachable_since = None
    while True:
      time.sleep(self._beat)
      try:
        beat += 1
        client.key_value_set(f'{_KEY}/beat/{self._me}', str(beat), allow_overwrite=True)
        failed = {_process_of(k): v for k, v in client.key_value_dir_get(f'{_KEY}/failed/')}
        beats = {_process_of(k): v for k, v in client.key_value_dir_get(f'{_KEY}/beat/')}
        gone = {_process_of(k) for k, _ in client.key_value_dir_get(f'{_KEY}/bye/')}
      except Exception as e:  # the store is process 0's; a loaded one may time out once
        unreachable_since = unreachable_since or time.monotonic()
        if time.monotonic() - unreachable_since > self._timeout:
          first = str(e).splitlines()[0] if str(e) else ''
          self._stop(f'lost the coordinator (process 0 of {self._n}) for over '
                     f'{self._timeout:g} s: {type(e).__name__}: {first}')
        continue
      unreachable_since = None
      if self.standing_down.is_set():
        continue
      failed.pop(self._me, None)
      if failed:
        p, message = min(failed.items())
        self._stop(f'process {p} of {self._n} failed: {message}')
      now = time.monotonic()
      for p, (last, since) in heard.items():
        if p in gone:  # it finished and left: its silence is no failure
          continue
        if beats.get(p) != last:
          heard[p] = (beats.get(p), now)
        elif now - since > self._timeout:
          self.silent.add(p)
          self._stop(f'process {p} of {self._n} has not been heard from for {now - since:.0f} s '
                     f'(distributed.timeout_seconds={self._timeout:g}): it died or hangs')

  def _stop(self, reason: str) -> None:
    self.stopping.set()
    print(f'error: {reason}; stopping process {self._me}', file=sys.stderr, flush=True)
    done = threading.Thread(target=self._cleanup, daemon=True)
    done.start()
    done.join(timeout=self.CLEANUP_SECONDS)
    leave(1)

  def _cleanup(self) -> None:
    for cleanup in self.cleanups:
      try:
        cleanup()
      except Exception:  # a cleanup must not keep the process from exiting
        pass
