"""Per-stage wall-clock timings shared by actor threads and the learner.

Each stage accumulates (seconds, calls); the logger drains them every log
step as mean milliseconds per call, so a slow run says which stage is slow.
"""

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
    """Adds `seconds` and `calls` to `stage`'s totals."""
    with self._lock:
      entry = self._totals[stage]
      entry[0] += seconds
      entry[1] += calls

  @contextlib.contextmanager
  def time(self, stage: str):
    """A context manager that adds its wall-clock time (time.perf_counter) to
    `stage` as one call, also when its body raises."""
    start = time.perf_counter()
    try:
      yield
    finally:
      self.add(stage, time.perf_counter() - start)

  def drain(self) -> dict:
    """The mean time per call of each stage since the last drain; resets the totals.

    Returns:
      {'timing/<stage>_ms': mean milliseconds per call} for every stage with
      calls.
    """
    with self._lock:
      totals, self._totals = self._totals, collections.defaultdict(lambda: [0.0, 0])
    return {f'timing/{stage}_ms': 1000.0 * s / n for stage, (s, n) in totals.items() if n}
