"""What the learner checks of its batches and updates: actor blocks joined into one batch
(`concat_blocks`) whose task ids are the run's (`check_task_ids`), and each update's metrics checked
for NaN and inf (`first_non_finite`)."""

from typing import Dict, List, Optional

import jax
import numpy as np

from agents.actor import UnrollBlock
from rl.types import Unroll


class NonFiniteError(FloatingPointError):
  """A learner quantity became NaN or inf; the last good state is saved."""


class TaskIdError(ValueError):
  """A batch holds steps of a task id the run does not have: the per-task
  loss terms would leave them out."""


def check_task_ids(unroll: Unroll, num_tasks: int) -> None:
  """TaskIdError naming the first task id of `unroll` (host arrays) outside
  [0, num_tasks), and how many steps carry such ids."""
  ids = np.asarray(unroll.task_id)
  bad = (ids < 0) | (ids >= num_tasks)
  if bad.any():
    raise TaskIdError(f'a batch holds {int(bad.sum())} steps of task id {int(ids[bad][0])}, '
                      f'outside the run\'s {num_tasks} tasks (0..{num_tasks - 1}): an env '
                      'family or actor gives task ids the config does not list')


# Checked after every update, in this order: the first non-finite one names
# the failure ('nonfinite/state' is a count that must be 0).
FINITE_CHECKS = ('loss/total', 'grad_norm', 'popart/mu', 'popart/sigma', 'nonfinite/state')


def first_non_finite(metrics: Dict) -> Optional[str]:
  """The first of FINITE_CHECKS present in `metrics` (host arrays) that is not
  finite ('nonfinite/state': not 0), or None."""
  for key in FINITE_CHECKS:
    if key not in metrics:
      continue
    value = metrics[key]
    if not np.all(np.isfinite(value)) or (key == 'nonfinite/state' and np.any(value != 0)):
      return key
  return None


def concat_blocks(blocks: List[UnrollBlock]) -> Unroll:
  """Actor blocks side by side: fields [T + 1, B_i, ...] on axis 1, core state
  [B_i, ...] on axis 0."""
  unrolls = [b.unroll for b in blocks]
  if len(unrolls) == 1:
    return unrolls[0]
  core = jax.tree.map(lambda *xs: np.concatenate(xs, axis=0), *[u.core_state for u in unrolls])
  rest = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1),
                      *[u._replace(core_state=None) for u in unrolls])
  return rest._replace(core_state=core)
