"""Per-stage wall-clock timings shared by actor threads and the learner,
drained every log step as mean milliseconds per call."""

import collections
import contextlib
import threading
import time


class StageTimer:
  """Accumulated wall-clock time and calls per stage. Thread-safe."""

  def __init__(self):
    self._lock = threading.Lock()
    self._totals = collections.defaultdict(lambda: [0.0, 0])

  def add(self, stage: str, seconds: float, calls: int = 1) -> None:
    with self._lock:
      entry = self._totals[stage]
      entry[0] += seconds
      entry[1] += calls

  @contextlib.contextmanager
  def time(self, stage: str):
    """Adds the block's wall-clock time to `stage` as one call, also when it raises."""
    start = time.perf_counter()
    try:
      yield
    finally:
      self.add(stage, time.perf_counter() - start)

  def drain(self) -> dict:
    """{'timing/<stage>_ms': mean ms per call} since the last drain; resets the totals."""
    with self._lock:
      totals, self._totals = self._totals, collections.defaultdict(lambda: [0.0, 0])
    return {f'timing/{stage}_ms': 1000.0 * s / n for stage, (s, n) in totals.items() if n}
