"""What the agent does, per task: action frequencies, policy entropy and
collapse onto one action, over a log window of the unrolls the learner
consumes. With several processes, process 0 sums their drained windows."""

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

COLLAPSE_THRESHOLD = 0.9  # one action above this share of a task's window = collapse


def _entropy(logits: np.ndarray) -> np.ndarray:
  z = logits - logits.max(-1, keepdims=True)
  log_p = z - np.log(np.exp(z).sum(-1, keepdims=True))
  return -(np.exp(log_p) * log_p).sum(-1)


class ActionStats:
  """A window of action counts and policy entropy for K tasks and A actions.

  Holds no lock: use it from one thread.
  """

  def __init__(self, num_tasks: int, num_actions: int):
    self._k, self._a = num_tasks, num_actions
    self.reset()

  def reset(self) -> None:
    self._counts = np.zeros((self._k, self._a), np.int64)
    self._entropy_sum = np.zeros(self._k)

  def add(self, task_id: np.ndarray, action: np.ndarray, logits: np.ndarray) -> None:
    """Adds one learner batch: task_id and action int [T, B], behaviour logits [T, B, A].

    The last step of each unroll is the first of the next, so it is skipped.
    """
    task_id, action, logits = task_id[:-1].ravel(), action[:-1].ravel(), logits[:-1]
    self._counts += np.bincount(task_id * self._a + action,
                                minlength=self._k * self._a).reshape(self._k, self._a)
    self._entropy_sum += np.bincount(task_id, weights=_entropy(logits).ravel(),
                                     minlength=self._k)

  def drain(self) -> Dict[str, list]:
    """The window as JSON-able lists ('counts' [K][A], 'entropy_sum' [K]); resets it."""
    window = {'counts': self._counts.tolist(), 'entropy_sum': self._entropy_sum.tolist()}
    self.reset()
    return window

  def summary(self, task_names: Sequence[str], action_names: Sequence[str],
              windows: Optional[Sequence[Dict[str, list]]] = None,
              ) -> Tuple[Dict[str, float], List[str]]:
    """The window's metrics, and a warning per collapsed task.

    Summarises the sum of `windows` (drained windows, one per process) or else
    this window, which it resets. Tasks without a step are left out.

    Returns:
      (metrics, warnings): `actions/<t>/<action>` (frequencies), `entropy/<t>`
      (mean per step) and `collapse/<t>` (1.0 when one action took more than
      COLLAPSE_THRESHOLD of the window); a warning line per collapsed task.
    """
    if windows is None:
      windows = [self.drain()]
    counts = np.sum([w['counts'] for w in windows], axis=0).reshape(self._k, self._a)
    entropy_sum = np.sum([w['entropy_sum'] for w in windows], axis=0).reshape(self._k)
    out, warnings = {}, []
    for k, name in enumerate(task_names):
      total = counts[k].sum()
      if not total:
        continue
      freqs = counts[k] / total
      for a, action in enumerate(action_names):
        out[f'actions/{name}/{action}'] = float(freqs[a])
      out[f'entropy/{name}'] = float(entropy_sum[k] / total)
      top = int(np.argmax(freqs))
      collapsed = freqs[top] > COLLAPSE_THRESHOLD
      out[f'collapse/{name}'] = float(collapsed)
      if collapsed:
        warnings.append(f'task {name}: action {action_names[top]!r} took {freqs[top]:.1%} of '
                        f'its {total:,} actions this window (policy collapse?)')
    return out, warnings
