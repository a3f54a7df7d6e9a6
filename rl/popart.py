"""Multi-task PopArt (van Hasselt et al. 2016, arXiv 1602.07714; Hessel et al.
2019, arXiv 1809.04474).

Each task i keeps moments mu_i, nu_i of its value targets; sigma_i = sqrt(nu_i - mu_i^2). The head
outputs normalised values n_i; the value is sigma_i n_i + mu_i, and when the statistics move the
head is rescaled so that value is unchanged ("preserve outputs"). The statistics
{'mu': [K], 'nu': [K]} live in the value head's Flax collection `popart`; the 'debiased' start
(Adam's bias correction) adds 'weight' [K] = 1 - (1 - beta)^t, so a task's first step sets its
statistics to its batch's.
"""

import dataclasses
from typing import Any, Dict, Optional, Tuple

import jax
import jax.numpy as jnp

from infra.settings import boolean, frozen_setting, one_of, setting, within

SIGMA_MIN = 1e-4
SIGMA_MAX = 1e6

Stats = Dict[str, jax.Array]

STARTS = ('identity', 'debiased')
STEP_RULES = ('batch', 'sample')
# Each task's step this update [K]; mean_metrics combines steps as 1 - prod(1 - s).
STEP_METRIC = 'popart/step'


@dataclasses.dataclass(frozen=True)
class PopArtConfig:
  """PopArt's settings (the config's `popart` group)."""
  enabled: bool = frozen_setting(False, 'one value output per task with PopArt; off = plain IMPALA',
                          boolean)
  beta: float = setting(3e-4, 'step size of the per-task moment updates',
                        within(0, 1, low_closed=False))
  start: str = frozen_setting(
      'identity', "'identity' (mu 0, sigma 1, then beta: the paper's) or 'debiased' (each "
      "task's first batch sets its statistics, step beta / (1 - (1 - beta)^t) after)",
      one_of(STARTS))
  step_per: str = setting(
      'batch', "'batch': each task's statistics take one step of beta per update toward its "
      "batch mean; 'sample': a step of beta per valid target, 1 - (1 - beta)^n for its n "
      'targets in the global batch (rlax art)', one_of(STEP_RULES))

  def problem(self):
    """A start or step rule other than the default needs PopArt on."""
    if self.start != 'identity' and not self.enabled:
      return ('start', f'{self.start!r} needs popart.enabled=True (without PopArt there are '
              'no statistics to start)')
    if self.step_per != 'batch' and not self.enabled:
      return ('step_per', f'{self.step_per!r} needs popart.enabled=True (without PopArt there '
              'are no statistics to move)')
    return None


def init_stats(num_tasks: int, start: str = 'identity') -> Stats:
  """K tasks' statistics before any update: mu 0, nu 1 (sigma 1), float32; with
  start 'debiased' also weight 0. ValueError for a `start` not in STARTS."""
  if start not in STARTS:
    raise ValueError(f'unknown PopArt start {start!r}; choose one of {", ".join(STARTS)}')
  stats = {'mu': jnp.zeros((num_tasks,), jnp.float32),
           'nu': jnp.ones((num_tasks,), jnp.float32)}
  return with_start(stats, start)


def with_start(stats: Stats, start: str) -> Stats:
  """`stats` plus a zero 'weight' per task for the debiased start (the head makes only mu, nu)."""
  if start == 'debiased' and 'weight' not in stats:
    return {**stats, 'weight': jnp.zeros_like(stats['mu'])}
  return stats


def sigma(stats: Stats) -> jax.Array:
  """Each task's scale sigma_i = sqrt(nu_i - mu_i^2), clipped to [SIGMA_MIN, SIGMA_MAX]; [K]."""
  # nu - mu^2 can round below zero in float32.
  variance = jnp.maximum(stats['nu'] - stats['mu'] ** 2, SIGMA_MIN ** 2)
  return jnp.clip(jnp.sqrt(variance), SIGMA_MIN, SIGMA_MAX)


def normalize(stats: Stats, x: jax.Array, task_ids: jax.Array) -> jax.Array:
  """(x - mu_i) / sigma_i, for task_ids (the shape of x)."""
  return (x - stats['mu'][task_ids]) / sigma(stats)[task_ids]


def unnormalize(stats: Stats, n: jax.Array, task_ids: jax.Array) -> jax.Array:
  """sigma_i * n + mu_i, for task_ids (the shape of n)."""
  return sigma(stats)[task_ids] * n + stats['mu'][task_ids]


def scale(stats: Stats, x: jax.Array, task_ids: jax.Array) -> jax.Array:
  """x / sigma_i: a difference of values (advantage, TD error), where mu cancels."""
  return x / sigma(stats)[task_ids]


def unnormalize_all(stats: Stats, n: jax.Array) -> jax.Array:
  """sigma * n + mu of every task's output, n [..., K]."""
  return sigma(stats) * n + stats['mu']


def update_stats(stats: Stats, targets: jax.Array, task_ids: jax.Array,
                 mask: jax.Array, beta: float, axis_name: Optional[str] = None,
                 per_sample: bool = False) -> Stats:
  return update_stats_and_step(stats, targets, task_ids, mask, beta, axis_name, per_sample)[0]


def update_stats_and_step(stats: Stats, targets: jax.Array, task_ids: jax.Array,
                          mask: jax.Array, beta: float, axis_name: Optional[str] = None,
                          per_sample: bool = False) -> Tuple[Stats, jax.Array]:
  """One PopArt step per task toward the mean of its targets in the global batch.

  mu_i <- (1 - a_i) mu_i + a_i mean_i(targets), nu_i likewise with squared targets. Per batch a_i =
  beta; per sample a_i = 1 - (1 - beta)^n_i for the task's n_i valid targets (n_i steps of beta,
  Hessel et al. 2019, eq. 6; rlax.art's n_i beta agrees to first order). With 'weight'
  (debiased start) w_i' = (1 - a_i) w_i + a_i and the step is a_i / w_i'. Tasks without valid
  targets keep their statistics.

  Args:
    targets: unnormalised value targets, any shape; task_ids and mask alike.

  Returns:
    (new statistics, step [K]): the step each task took, 0 without targets.
  """
  num_tasks = stats['mu'].shape[0]
  weights = jax.nn.one_hot(task_ids, num_tasks) * mask[..., None]
  sum_axes = tuple(range(targets.ndim))
  count = jnp.sum(weights, axis=sum_axes)
  sum1 = jnp.sum(weights * targets[..., None], axis=sum_axes)
  sum2 = jnp.sum(weights * (targets ** 2)[..., None], axis=sum_axes)
  if axis_name is not None:
    count, sum1, sum2 = jax.lax.psum((count, sum1, sum2), axis_name)
  present = count > 0
  safe_count = jnp.maximum(count, 1.0)
  # 1 - (1 - beta)^n without the rounding of a power near 1.
  alpha = -jnp.expm1(count * jnp.log1p(-beta)) if per_sample else jnp.full_like(count, beta)
  new = {}
  step = alpha
  if 'weight' in stats:
    weight = (1 - alpha) * stats['weight'] + alpha
    step = alpha / jnp.where(present, weight, 1.0)
    new['weight'] = jnp.where(present, weight, stats['weight'])
  new['mu'] = jnp.where(present, (1 - step) * stats['mu'] + step * sum1 / safe_count, stats['mu'])
  new['nu'] = jnp.where(present, (1 - step) * stats['nu'] + step * sum2 / safe_count, stats['nu'])
  return new, jnp.where(present, step, 0.0)


def preserve_outputs(head_params: Dict[str, jax.Array], old: Stats,
                     new: Stats) -> Dict[str, jax.Array]:
  """Rescales a Dense value head (kernel [H, K], bias [K]) from `old` to `new`
  statistics: w' = w sigma / sigma', b' = (sigma b + mu - mu') / sigma', so
  sigma' (w' h + b') + mu' == sigma (w h + b) + mu for every h."""
  sigma_old, sigma_new = sigma(old), sigma(new)
  kernel = head_params['kernel'] * (sigma_old / sigma_new)
  bias = (sigma_old * head_params['bias'] + old['mu'] - new['mu']) / sigma_new
  return {**head_params, 'kernel': kernel, 'bias': bias}


def rescaled_value(old: Stats, new: Stats, n: jax.Array, task_ids: jax.Array) -> jax.Array:
  """(sigma n + mu - mu') / sigma': the normalised value the head gives after
  `preserve_outputs`, which the losses compare targets with."""
  return (sigma(old)[task_ids] * n + old['mu'][task_ids] - new['mu'][task_ids]) / sigma(new)[task_ids]


def preserved_from(old: Stats, new: Stats) -> Stats:
  """The statistics a categorical head's outputs are preserved from (rl/sgd.py).

  `old`, except at a task's first debiased step (weight 0): its placeholder statistics hold nothing
  learnt, and rescaling from them would leave the head off by 1 / sigma, so its affine stays.
  """
  if 'weight' not in old:
    return old
  first = old['weight'] == 0
  return {key: jnp.where(first, new[key], value) if key in new else value
          for key, value in old.items()}


def rescale_head(params: Dict[str, Any], value_head: str, old: Stats, new: Stats) -> Dict[str, Any]:
  """`params` with the Dense head `params[value_head]` rescaled (`preserve_outputs`)."""
  return {**params, value_head: preserve_outputs(params[value_head], old, new)}


def rescale_head_grads(grads: Dict[str, Any], value_head: str, old: Stats, new: Stats
                       ) -> Dict[str, Any]:
  """A gradient taken at the head before its rescale, moved to the rescaled head.

  The loss as a function of w' = w sigma / sigma' has gradient sigma' / sigma times the old
  (likewise b). Only the head's 'kernel' and 'bias' are scaled (not a categorical head's logits).
  """
  head = grads[value_head]
  ratio = sigma(new) / sigma(old)
  return {**grads, value_head: {**head, 'kernel': head['kernel'] * ratio,
                                'bias': head['bias'] * ratio}}
