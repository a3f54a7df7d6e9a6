"""Multi-task PopArt (van Hasselt et al. 2016, arXiv 1602.07714; Hessel et al.
2019, arXiv 1809.04474).

Each task i keeps a first moment mu_i and a second moment nu_i of its value
targets; sigma_i = sqrt(nu_i - mu_i^2), clipped to [1e-4, 1e6]. The value head
outputs normalised values n_i(x); the unnormalised value is sigma_i n_i + mu_i.
After the statistics move, the task's column of the value head is rescaled so
the unnormalised outputs are unchanged ("preserve outputs").

The statistics are a dict {'mu': [K], 'nu': [K]}, stored in the Flax variable
collection `popart` of the network's value head. With the debiased start
(`popart.start='debiased'`) they also hold 'weight' [K], each task's
debiasing term 1 - (1 - beta)^t after t steps of beta (updates, or targets
with the per-sample rule; the learner adds it; the network does not read it).

Two starts (`STARTS`):
- 'identity' (the paper's): mu 0, nu 1, then mu <- (1 - beta) mu + beta m
  for a batch mean m. A task whose returns are in the hundreds needs
  about 1 / beta updates before sigma reaches their scale.
- 'debiased' (Adam's bias correction; MAPPO's ValueNorm): the same moving
  averages started at 0 and divided by their weight, which makes the step
  beta_t = beta / (1 - (1 - beta)^t): 1 at a task's first update (its
  statistics become that batch's), about 1/t while t << 1 / beta (the
  mean of the batches so far, as a count-based normaliser), and beta
  after (the paper's rule).

Two step rules (`STEP_RULES`, `popart.step_per`): beta per update on each
task's batch mean ('batch', the seed's), or beta per valid target
('sample', rlax `art` and the paper's equation 6), 1 - (1 - beta)^n per
update for n targets of the task: at beta 3e-4 a task with 640 targets in a
batch moves 0.175 of the way per update, not 0.0003.
"""

import dataclasses
from typing import Any, Dict, Optional, Tuple

import jax
import jax.numpy as jnp

from infra.settings import boolean, one_of, setting, within

SIGMA_MIN = 1e-4
SIGMA_MAX = 1e6

Stats = Dict[str, jax.Array]

STARTS = ('identity', 'debiased')
# How far one update moves a task's statistics (`popart.step_per`): a step of
# beta per update on the batch mean (the seed's rule), or a step of beta per
# valid target, 1 - (1 - beta)^n for n targets (rlax `art`, the paper's eq. 6).
STEP_RULES = ('batch', 'sample')
# The loss's metric of each task's step this update [K] (0 without targets);
# rl/task_metrics.mean_metrics combines an update's steps, 1 - prod(1 - s).
STEP_METRIC = 'popart/step'


@dataclasses.dataclass(frozen=True)
class PopArtConfig:
  """PopArt's settings (the config's `popart` group)."""
  enabled: bool = setting(False, 'one value output per task with PopArt; off = plain IMPALA',
                          boolean)
  beta: float = setting(3e-4, 'step size of the per-task moment updates',
                        within(0, 1, low_closed=False))
  start: str = setting(
      'identity', "'identity' (mu 0, sigma 1, then beta: the paper's) or 'debiased' (each "
      "task's first batch sets its statistics, step beta / (1 - (1 - beta)^t) after)",
      one_of(STARTS))
  step_per: str = setting(
      'batch', "'batch': each task's statistics take one step of beta per update toward its "
      "batch mean; 'sample': a step of beta per valid target, 1 - (1 - beta)^n for its n "
      'targets in the global batch (rlax art)', one_of(STEP_RULES))

  def problem(self):
    """A start other than 'identity' needs PopArt on."""
    if self.start != 'identity' and not self.enabled:
      return ('start', f'{self.start!r} needs popart.enabled=True (without PopArt there are '
              'no statistics to start)')
    if self.step_per != 'batch' and not self.enabled:
      return ('step_per', f'{self.step_per!r} needs popart.enabled=True (without PopArt there '
              'are no statistics to move)')
    return None


def init_stats(num_tasks: int, start: str = 'identity') -> Stats:
  """The statistics of K tasks before any update.

  mu = 0 and nu = 1, so sigma starts at 1: the identity normalisation; with
  start 'debiased' also weight 0 (no update taken yet). All float32.

  Args:
    num_tasks: the number of tasks K.
    start: one of STARTS.

  Returns:
    {'mu': [K], 'nu': [K]}, and 'weight': [K] for the debiased start.

  Raises:
    ValueError: `start` is not one of STARTS.
  """
  if start not in STARTS:
    raise ValueError(f'unknown PopArt start {start!r}; choose one of {", ".join(STARTS)}')
  stats = {'mu': jnp.zeros((num_tasks,), jnp.float32),
           'nu': jnp.ones((num_tasks,), jnp.float32)}
  return with_start(stats, start)


def with_start(stats: Stats, start: str) -> Stats:
  """Statistics ready for a start.

  The network's head makes only mu and nu; the debiased start also needs a
  weight per task.

  Args:
    stats: PopArt statistics.
    start: one of STARTS.

  Returns:
    For the debiased start, `stats` with a zero 'weight' per task when it has
    none; otherwise `stats` as given.
  """
  if start == 'debiased' and 'weight' not in stats:
    return {**stats, 'weight': jnp.zeros_like(stats['mu'])}
  return stats


def sigma(stats: Stats) -> jax.Array:
  """Each task's scale sigma_i = sqrt(nu_i - mu_i^2).

  The variance is floored at SIGMA_MIN^2 (in float32 it can round below 0)
  and sigma clipped to [SIGMA_MIN, SIGMA_MAX].

  Args:
    stats: PopArt statistics.

  Returns:
    sigma [K].
  """
  # nu - mu^2 can round below zero in float32; floor it before the sqrt.
  variance = jnp.maximum(stats['nu'] - stats['mu'] ** 2, SIGMA_MIN ** 2)
  return jnp.clip(jnp.sqrt(variance), SIGMA_MIN, SIGMA_MAX)


def normalize(stats: Stats, x: jax.Array, task_ids: jax.Array) -> jax.Array:
  """Values in each task's normalised units: (x - mu_i) / sigma_i.

  Args:
    stats: PopArt statistics.
    x: values in unnormalised units, any shape.
    task_ids: int task i of each element, the shape of x.

  Returns:
    An array the shape of x.
  """
  return (x - stats['mu'][task_ids]) / sigma(stats)[task_ids]


def unnormalize(stats: Stats, n: jax.Array, task_ids: jax.Array) -> jax.Array:
  """Normalised values back in unnormalised units: sigma_i * n + mu_i.

  Args:
    stats: PopArt statistics.
    n: normalised values, any shape.
    task_ids: int task i of each element, the shape of n.

  Returns:
    An array the shape of n.
  """
  return sigma(stats)[task_ids] * n + stats['mu'][task_ids]


def scale(stats: Stats, x: jax.Array, task_ids: jax.Array) -> jax.Array:
  """A difference of values in each task's normalised units: x / sigma_i.

  For an advantage or a TD error; no shift, as mu cancels in a difference.

  Args:
    stats: PopArt statistics.
    x: differences of unnormalised values, any shape.
    task_ids: int task i of each element, the shape of x.

  Returns:
    An array the shape of x.
  """
  return x / sigma(stats)[task_ids]


def unnormalize_all(stats: Stats, n: jax.Array) -> jax.Array:
  """Every task's value head's outputs in unnormalised units: sigma * n + mu.

  Args:
    stats: PopArt statistics.
    n: normalised outputs [..., K].

  Returns:
    An array [..., K].
  """
  return sigma(stats) * n + stats['mu']


def update_stats(stats: Stats, targets: jax.Array, task_ids: jax.Array,
                 mask: jax.Array, beta: float, axis_name: Optional[str] = None,
                 per_sample: bool = False) -> Stats:
  """`update_stats_and_step`'s new statistics alone (the same arguments)."""
  return update_stats_and_step(stats, targets, task_ids, mask, beta, axis_name, per_sample)[0]


def update_stats_and_step(stats: Stats, targets: jax.Array, task_ids: jax.Array,
                          mask: jax.Array, beta: float, axis_name: Optional[str] = None,
                          per_sample: bool = False) -> Tuple[Stats, jax.Array]:
  """One PopArt step per task toward the batch mean of that task's targets.

  mu_i <- (1 - a_i) mu_i + a_i * mean(targets of task i), likewise nu_i with
  the squared targets, where the means run over every valid target of task i
  in the global batch (summed across `axis_name` devices). The per-batch rule
  takes a_i = beta whatever the batch size (the seed's PopArt). The per-sample
  rule takes a_i = 1 - (1 - beta)^n_i for the task's n_i valid targets: n_i
  steps of beta on targets equal to their mean (the paper's equation 6 per
  sample; rlax.art sums the n_i steps, n_i beta, which agrees to first order
  in n_i beta and exactly at n_i = 1). Tasks with no valid target keep their
  statistics. With a 'weight' in `stats` (the debiased start) the weight
  moves as a moment of the constant 1, w_i' = (1 - a_i) w_i + a_i, and the
  step is a_i / w_i'.

  See "Learning values across many orders of magnitude" by van Hasselt et al.
  2016 (https://arxiv.org/abs/1602.07714) and "Multi-task Deep Reinforcement
  Learning with PopArt" by Hessel et al. 2019 (https://arxiv.org/abs/1809.04474).

  Args:
    stats: PopArt statistics of K tasks.
    targets: value targets in unnormalised units, any shape.
    task_ids: int task of each target, the shape of targets.
    mask: 1 for valid targets, 0 otherwise, the shape of targets.
    beta: the step size.
    axis_name: the devices the batch spans; None for one device.
    per_sample: the per-sample rule instead of the per-batch rule.

  Returns:
    (new statistics with the keys of `stats`, step [K]): the step each
    task's moments took this update, 0 for a task without targets.
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
  """Rescales a Dense value head for new statistics, preserving its outputs.

  w' = w sigma / sigma',  b' = (sigma b + mu - mu') / sigma', so that
  sigma' (w' h + b') + mu' == sigma (w h + b) + mu for every input h.

  Args:
    head_params: the head's params, kernel [H, K] and bias [K].
    old: the statistics the head was trained for.
    new: the statistics to rescale it to.

  Returns:
    `head_params` with kernel and bias replaced; other entries unchanged.
  """
  sigma_old, sigma_new = sigma(old), sigma(new)
  kernel = head_params['kernel'] * (sigma_old / sigma_new)
  bias = (sigma_old * head_params['bias'] + old['mu'] - new['mu']) / sigma_new
  return {**head_params, 'kernel': kernel, 'bias': bias}


def rescaled_value(old: Stats, new: Stats, n: jax.Array, task_ids: jax.Array) -> jax.Array:
  """The normalised value a head gives after `preserve_outputs`.

  For a head that gave normalised value `n` under `old`:
  (sigma n + mu - mu') / sigma', per element's task. The losses compare
  targets with this, the value the rescaled network would see.

  Args:
    old: the statistics `n` was produced under.
    new: the statistics the head is rescaled to.
    n: normalised values, any shape.
    task_ids: int task i of each element, the shape of n.

  Returns:
    An array the shape of n.
  """
  return (sigma(old)[task_ids] * n + old['mu'][task_ids] - new['mu'][task_ids]) / sigma(new)[task_ids]


def preserved_from(old: Stats, new: Stats) -> Stats:
  """The statistics a categorical head's outputs are preserved from.

  `old`, except for a task taking its first step under the debiased start
  (weight 0): its statistics were the placeholder mu 0, sigma 1, under which
  the head has learnt nothing, and rescaling its affine from them would
  leave it off by the task's scale (1 / sigma) until the optimiser brings
  it back. Such a task's affine is left as it is (its old statistics taken
  as the new). The IMPALA loss returns these as its LossOutput's
  `preserve_from`, which rl/sgd.py rescales the head from.

  Args:
    old: the statistics before the step.
    new: the statistics after it.

  Returns:
    Statistics with the keys of `old`.
  """
  if 'weight' not in old:
    return old
  first = old['weight'] == 0
  return {key: jnp.where(first, new[key], value) if key in new else value
          for key, value in old.items()}


def rescale_head(params: Dict[str, Any], value_head: str, old: Stats, new: Stats) -> Dict[str, Any]:
  """Network params with the value head rescaled for new statistics.

  Args:
    params: the network's params.
    value_head: the top-level name of the Dense value head in `params`.
    old: the statistics the head was trained for.
    new: the statistics to rescale it to.

  Returns:
    `params` with `params[value_head]` rescaled (`preserve_outputs`); the
    other params unchanged.
  """
  return {**params, value_head: preserve_outputs(params[value_head], old, new)}


def rescale_head_grads(grads: Dict[str, Any], value_head: str, old: Stats, new: Stats
                       ) -> Dict[str, Any]:
  """A gradient taken at the head before its rescale, moved to the rescaled head.

  The loss sees the head through w h + b; at w' = w sigma / sigma' the same
  loss as a function of w' has gradient sigma' / sigma times the old one
  (likewise b), so the optimiser steps the parameters the network now has.

  Args:
    grads: the gradient, a pytree shaped like the network's params.
    value_head: the top-level name of the value head.
    old: the statistics before the rescale.
    new: the statistics after it.

  Returns:
    `grads` with the value head's 'kernel' and 'bias' scaled by sigma' /
    sigma per task; the rest unchanged (a categorical head's logits layer,
    which the rescale does not touch).
  """
  head = grads[value_head]
  ratio = sigma(new) / sigma(old)
  return {**grads, value_head: {**head, 'kernel': head['kernel'] * ratio,
                                'bias': head['bias'] * ratio}}
