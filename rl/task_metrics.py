"""Per-task metrics of a multi-task loss ([K], means over each task's valid
steps) and an update's metrics from those of its optimiser steps."""

from typing import Optional

import jax.numpy as jnp

from rl import actor_critic as ac
from rl import popart

TASK_COUNT = 'task/count'


def task_metrics(value_error_sq, norm_target, advantage, mask, task, num_tasks: int,
                 axis_name: Optional[str]) -> dict:
  """Per-task metrics, global over `axis_name`.

  Args:
    value_error_sq: mask * (target - value)^2, normalised units [T, B].
    advantage: before any normalisation, in sigma units [T, B].
    mask, task, norm_target: [T, B].

  Returns:
    [K] arrays: 'task/value_loss' (before the baseline cost), 'task/norm_target_mean',
    'task/norm_target_std', 'task/advantage_rms' and TASK_COUNT (each task's valid steps).
  """
  sums = lambda x: ac.global_sum(ac.task_sums(x, mask, task, num_tasks), axis_name)
  count = sums(jnp.ones_like(mask))
  per_step = lambda x: sums(x) / jnp.maximum(count, 1.0)
  target_mean = per_step(norm_target)
  target_var = jnp.maximum(per_step(norm_target ** 2) - target_mean ** 2, 0.0)
  return {'task/value_loss': 0.5 * per_step(value_error_sq),
          'task/norm_target_mean': target_mean,
          'task/norm_target_std': jnp.sqrt(target_var),
          'task/advantage_rms': jnp.sqrt(per_step(advantage ** 2)),
          TASK_COUNT: count}


def mean_metrics(step_metrics: dict) -> dict:
  """An update's metrics from its optimiser steps' (a leading axis).

  Per-task metrics are weighted by TASK_COUNT, so a minibatch without a task does not pull its mean
  to 0; PopArt's steps combine as 1 - prod(1 - s); TASK_COUNT is summed; the rest are plain means.
  """
  out = {k: jnp.mean(x, axis=0) for k, x in step_metrics.items() if not k.startswith('task/')}
  if popart.STEP_METRIC in step_metrics:   # the update's move: its steps one after another
    out[popart.STEP_METRIC] = 1.0 - jnp.prod(1.0 - step_metrics[popart.STEP_METRIC], axis=0)
  if TASK_COUNT in step_metrics:
    count = step_metrics[TASK_COUNT]
    total = jnp.maximum(jnp.sum(count, axis=0), 1.0)
    for k, x in step_metrics.items():
      if k.startswith('task/') and k != TASK_COUNT:
        out[k] = jnp.sum(x * count, axis=0) / total
    out[TASK_COUNT] = jnp.sum(count, axis=0)
  return out
