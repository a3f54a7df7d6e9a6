"""What the learner checks of its batches and updates: actor blocks joined
into one batch (`concat_blocks`), and each update's metrics checked for NaN
and inf (`first_non_finite`)."""

from typing import Dict, List, Optional

import jax
import numpy as np

from agents.actor import UnrollBlock
from rl.types import Unroll


class NonFiniteError(FloatingPointError):
  """A learner quantity became NaN or inf; the last good state is saved."""


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
