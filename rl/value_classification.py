"""Value learning as classification: a categorical value head trained by cross-entropy against the
target projected onto a fixed support of `bins` centres on [-limit, limit] ('hl_gauss': Farebrother
et al. 2024, arXiv 2403.03950; 'two_hot': DreamerV3, Hafner et al. 2023, arXiv 2301.04104).

With PopArt the support is in each task's normalised units; without, in symlog units, and V-trace's
advantages are divided per task by max(1, P95 - P5) of its value targets (moving averages), so large
returns are scaled down and small ones never up.
"""

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp

from infra.settings import frozen_setting, integer, one_of, positive, setting, within

HEADS = ('scalar', 'hl_gauss', 'two_hot')
# A categorical head's logits layer in its params (its affine: 'kernel', 'bias').
LOGITS = 'logits'
PROJECTIONS = HEADS[1:]
# The return-range statistics (per task) kept beside PopArt's without PopArt.
RANGE_KEYS = ('return_p5', 'return_p95')


@dataclasses.dataclass(frozen=True)
class ValueConfig:
  """The value head and its loss (the config's `value` group)."""
  head: str = frozen_setting(
      'scalar', "'scalar' (one output per value, squared error: IMPALA, PopArt), 'hl_gauss' or "
      "'two_hot' (a categorical over `bins` centres on [-limit, limit], cross-entropy)",
      one_of(HEADS))
  bins: int = frozen_setting(51, 'bins of a categorical head', integer(2))
  limit: float = setting(10.0, "a categorical head's support is [-limit, limit]: PopArt's "
                         'normalised units with PopArt, symlog units without', positive)
  sigma_ratio: float = setting(0.75, "'hl_gauss': the Gaussian's sigma in bin widths", positive)
  range_rate: float = setting(
      0.01, "a categorical head without PopArt: the moving averages' step toward each "
      "task's P5 and P95 of its value targets per optimiser step; advantages are divided "
      'by max(1, P95 - P5)', within(0, 1, low_closed=False))

  @property
  def categorical(self) -> bool:
    return self.head in PROJECTIONS


def support(bins: int, limit: float) -> jax.Array:
  return jnp.linspace(-limit, limit, bins, dtype=jnp.float32)


def _normal_cdf(x):
  return 0.5 * (1.0 + jax.scipy.special.erf(x / jnp.sqrt(2.0)))


def hl_gauss(targets: jax.Array, centres: jax.Array, sigma_ratio: float = 0.75) -> jax.Array:
  """Targets [...] as HL-Gauss distributions [..., n] (Farebrother et al. 2024).

  Bin k's probability is the mass of N(y, (sigma_ratio w)^2) over [c_k - w/2, c_k + w/2]
  (w the bin width), renormalised over the support, for y clipped to [c_0, c_{n-1}].
  """
  width = centres[1] - centres[0]
  y = jnp.clip(targets, centres[0], centres[-1])[..., None]
  edges = jnp.concatenate([centres - width / 2, centres[-1:] + width / 2])
  cdf = _normal_cdf((edges - y) / (sigma_ratio * width))
  mass = cdf[..., 1:] - cdf[..., :-1]
  return mass / (cdf[..., -1:] - cdf[..., :1])


def two_hot(targets: jax.Array, centres: jax.Array) -> jax.Array:
  """Targets [...] as two-hot distributions [..., n]: y clipped to [c_0, c_{n-1}] with c_k <= y <=
  c_{k+1} gives them (c_{k+1} - y) / w and (y - c_k) / w, so the mean is y."""
  n = centres.shape[0]
  width = centres[1] - centres[0]
  y = jnp.clip(targets, centres[0], centres[-1])
  low = jnp.clip(jnp.floor((y - centres[0]) / width).astype(jnp.int32), 0, n - 2)
  upper = jnp.clip((y - centres[low]) / width, 0.0, 1.0)
  return (jax.nn.one_hot(low, n) * (1.0 - upper)[..., None]
          + jax.nn.one_hot(low + 1, n) * upper[..., None])


def project(projection: str, targets: jax.Array, centres: jax.Array,
            sigma_ratio: float = 0.75) -> jax.Array:
  """Targets [...] as distributions [..., n] on `centres` by `projection`; ValueError if unknown."""
  if projection == 'hl_gauss':
    return hl_gauss(targets, centres, sigma_ratio)
  if projection == 'two_hot':
    return two_hot(targets, centres)
  raise ValueError(f'unknown projection {projection!r}; choose one of {", ".join(PROJECTIONS)}')


def mean(logits: jax.Array, centres: jax.Array) -> jax.Array:
  """The value of a categorical head: its softmax's mean over the centres."""
  return jnp.sum(jax.nn.softmax(logits, axis=-1) * centres, axis=-1)


def cross_entropy(logits: jax.Array, target_probs: jax.Array) -> jax.Array:
  """-sum_k p_k log softmax(logits)_k over the last axis, the target stopped."""
  return -jnp.sum(jax.lax.stop_gradient(target_probs) * jax.nn.log_softmax(logits, axis=-1),
                  axis=-1)


def symlog(x: jax.Array) -> jax.Array:
  """sign(x) log(1 + |x|) (DreamerV3)."""
  return jnp.sign(x) * jnp.log1p(jnp.abs(x))


def symexp(x: jax.Array) -> jax.Array:
  """sign(x) (exp(|x|) - 1), the inverse of `symlog`."""
  return jnp.sign(x) * jnp.expm1(jnp.abs(x))


def init_range(num_tasks: int) -> dict:
  """Each task's P5 and P95 before any update: 0 (the scale starts at 1)."""
  return {key: jnp.zeros((num_tasks,), jnp.float32) for key in RANGE_KEYS}


def update_return_range(stats: dict, targets: jax.Array, task_ids: jax.Array, mask: jax.Array,
                        rate: float, axis_name: Optional[str] = None) -> dict:
  """Each task's P5 and P95 of its value targets as moving averages (DreamerV3's
  return normalisation, per task): p <- (1 - rate) p + rate percentile_i.

  Each device's percentiles are averaged over the devices holding the task; tasks without a valid
  target keep theirs. Returns `stats` with RANGE_KEYS moved.
  """
  num_tasks = stats[RANGE_KEYS[0]].shape[0]
  flat_targets, flat_tasks = targets.reshape(-1), task_ids.reshape(-1)
  valid = mask.reshape(-1) > 0

  def task_percentiles(i):
    chosen = jnp.where(valid & (flat_tasks == i), flat_targets, jnp.nan)
    return jnp.nan_to_num(jnp.nanpercentile(chosen, jnp.asarray([5.0, 95.0])))

  percentiles = jax.vmap(task_percentiles)(jnp.arange(num_tasks))      # [K, 2]
  present = jnp.any(valid[None, :] & (flat_tasks[None, :] == jnp.arange(num_tasks)[:, None]),
                    axis=1).astype(jnp.float32)
  total, holders = percentiles * present[:, None], present
  if axis_name is not None:
    total, holders = jax.lax.psum((total, holders), axis_name)
  batch = total / jnp.maximum(holders, 1.0)[:, None]
  new = dict(stats)
  for j, key in enumerate(RANGE_KEYS):
    moved = (1.0 - rate) * stats[key] + rate * batch[:, j]
    new[key] = jnp.where(holders > 0, moved, stats[key])
  return new


def advantage_scale(stats: dict) -> jax.Array:
  """Each task's advantage divisor max(1, P95 - P5) [K]."""
  return jnp.maximum(1.0, stats[RANGE_KEYS[1]] - stats[RANGE_KEYS[0]])
