"""What the two learners share: V-trace IMPALA (rl/impala.py) and PPO (rl/ppo.py).

- `LossConfig`: the settings every learner reads (discount, loss weights,
  reward transform, PopArt, reduction) and the learner's own settings.
- `Learner`: what rl/algorithms.py's table holds for each learner.
- `evaluate_unroll`: one forward pass over an unroll and what both losses
  take from it: each step's value from its task's head, unnormalised with
  the PopArt statistics (and out of h-space), log-probabilities of the
  learner's and the behaviour policy, and the transformed rewards.
- `episode_aware`: the transitions of an unroll that may cross episodes.
- `num_valid`, `normalize`: sums and means over the valid steps of the
  global batch (summed across `axis_name` devices).

Shapes are time-major: the unroll's T + 1 rows, T transitions.
"""

from typing import Any, Callable, NamedTuple, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from infra import settings as settings_lib
from rl import popart
from rl import rewards as rewards_lib
from rl import value_classification as vc
from rl.types import Unroll


class LossConfig(NamedTuple):
  discount: float
  baseline_cost: float
  entropy_cost: float
  reward_mode: str
  popart_enabled: bool
  popart_beta: float
  # 'sum' over time and batch (IMPALA's code), or 'mean' over the global
  # batch's valid steps (A2C's code): the same direction, 1/N the size, which
  # matters for the clip and for RMSProp's epsilon.
  reduction: str = 'sum'
  name: str = 'impala'   # the learner (rl/algorithms.py): 'impala', 'ppo' or one registered
  settings: Any = None   # the learner's own settings (rl/impala.VTraceConfig, rl/ppo.PPOConfig,
                         # ...: its config group); None: its defaults
  num_tasks: int = 1     # tasks in the run (per-task metrics, per-task normalisation)
  # Clip the policy-and-entropy gradient and the value gradient each to the
  # clip, then add them (the config's optimizer.clip_by='term'; V-trace
  # only), instead of clipping their sum in the optimiser.
  clip_per_term: bool = False
  # PopArt's step per valid target (popart.step_per='sample') instead of per update.
  popart_per_sample: bool = False
  # The value head and its loss (rl/value_classification.py); the default: a scalar head.
  value: vc.ValueConfig = vc.ValueConfig()


class Learner(NamedTuple):
  """A learner as rl/algorithms.py's table holds it: what the rest of the
  code needs to build, size, check and checkpoint its update.

  Attributes:
    name: the config's `loss.name` that picks it.
    config_group: the run config's group of its own settings (e.g. 'vtrace').
    make_update: (apply_fn, loss_cfg, optimizer, value_head, axis_name,
      seed, max_grad_norm) -> the per-device update,
      update(params, opt_state, stats, batch, step) -> (params, opt_state,
      new_stats, metrics); with `init_state`, update(params, opt_state,
      stats, batch, step, algorithm_state) -> (params, opt_state,
      new_stats, metrics, algorithm_state).
    optimizer_steps: its settings -> optimiser steps per learner update (the
      learning-rate schedule counts them).
    batch_split: (settings, unrolls per learner device, unroll length) ->
      None, or (field of its group, why) when its minibatches cannot cut
      a device's shard.
    settings_type: its settings dataclass (infra/settings.py: each field's
      type, default, help and check, and `problem()` across them), which the
      update reads from `LossConfig.settings`; configs/common.base_config
      makes its config group from the defaults.
    init_state: params -> the state the learner keeps between updates
      (agents/learner.LearnerState.algorithm, saved and restored with the
      checkpoint); None: it keeps none.
  """
  name: str
  config_group: str
  make_update: Callable[..., Callable]
  optimizer_steps: Callable[[Any], int]
  batch_split: Callable[[Any, int, int], Optional[Tuple[str, str]]]
  settings_type: type
  init_state: Optional[Callable[[Any], Any]] = None

  def read_settings(self, group, check: bool = True):
    """Its settings of its config group (unknown fields refused).

    Args:
      group: the config group (ml_collections or a mapping).
      check: False: skip the fields' checks.

    Returns:
      A frozen `settings_type`.

    Raises:
      infra.settings.SettingsError: naming the group's first bad field.
    """
    return settings_lib.read(self.settings_type, group, self.config_group, check=check)


class LossOutput(NamedTuple):
  loss: jax.Array
  new_stats: popart.Stats
  metrics: dict
  extras: dict    # per-step intermediates for tests and analysis (dead code under jit)
  # The statistics the value head's outputs are preserved from when the step
  # rescales it (rl/sgd.py); None: the statistics the loss started from.
  preserve_from: Optional[popart.Stats] = None


class Evaluation(NamedTuple):
  """One unroll through the network, per step [T + 1, B] or per transition [T, B]."""
  n: jax.Array             # [T + 1, B] normalised value of each step's task head
  values: jax.Array        # [T + 1, B] sigma n + mu (in h-space for reward mode 'h')
  raw_values: jax.Array    # [T + 1, B] values in reward units (h^-1 applied)
  value_idx: jax.Array     # [T + 1, B] the value head each step reads
  log_pi: jax.Array        # [T, B, A] the learner's log-policy
  log_mu: jax.Array        # [T, B, A] the behaviour policy's
  log_pi_a: jax.Array      # [T, B] of the action taken
  log_mu_a: jax.Array      # [T, B]
  rewards: jax.Array       # [T, B] after the reward transform
  unit_max: Optional[jax.Array]  # the network's health output, when asked for
  value_logits: Optional[jax.Array] = None  # [T + 1, B, bins] a categorical head's, per step's head


def value_index(cfg: LossConfig, task_id: jax.Array) -> jax.Array:
  """The value head each step reads.

  Args:
    cfg: the loss settings; `cfg.popart_enabled` picks the rule.
    task_id: int task index per step, any shape.

  Returns:
    With PopArt, `task_id` (each step reads its task's head); without, zeros of
    the same shape and dtype (head 0).
  """
  return task_id if cfg.popart_enabled else jnp.zeros_like(task_id)


def symlog_values(cfg: LossConfig) -> bool:
  """Whether values are learnt in symlog space: a categorical head without
  PopArt (rl/value_classification.py)."""
  return cfg.value.categorical and not cfg.popart_enabled


def take(x: jax.Array, index: jax.Array) -> jax.Array:
  """Picks one entry of the last axis per element: x[..., index].

  Args:
    x: array [..., N].
    index: int array [...], each entry in [0, N).

  Returns:
    Array [...] whose element i is x[i][index[i]].
  """
  return jnp.take_along_axis(x, index[..., None], axis=-1)[..., 0]


def evaluate_unroll(apply_fn: Callable, cfg: LossConfig, params, stats: popart.Stats,
                    batch: Unroll) -> Evaluation:
  """Runs the network over an unroll and takes out what both losses use.

  Each step's value is read from its task's head (`value_index`),
  unnormalised with the PopArt statistics and, for reward mode 'h', mapped out
  of h-space to reward units (out of symlog space for a categorical head
  without PopArt, `symlog_values`). Log-probabilities are taken for the T
  transitions (rows 0..T-1); the rewards are transformed as
  `cfg.reward_mode` says. Nothing is stopped from gradients here.

  Args:
    apply_fn: `apply_fn(params, stats, obs, first, core_state)` returns logits
      [T + 1, B, A], normalised values [T + 1, B, K] and, with health, the
      units' maxima as its fourth output; a categorical head's logits
      [T + 1, B, K, bins] as its fifth.
    cfg: the loss settings.
    params: the network's parameters.
    stats: the PopArt statistics (rl/popart.py).
    batch: the unroll, time-major [T + 1, B, ...].

  Returns:
    An Evaluation: n, values, raw_values and value_idx [T + 1, B]; log_pi and
    log_mu [T, B, A]; log_pi_a, log_mu_a and rewards [T, B]; unit_max when
    `apply_fn` gives it, else None; value_logits [T + 1, B, bins] (each
    step's head) for a categorical head, else None.

  Raises:
    AssertionError: the logits' leading shape is not the actions' [T + 1, B].
  """
  out = apply_fn(params, stats, batch.obs, batch.first, batch.core_state)
  logits, norm_values = out[0], out[1]
  unit_max = out[3] if len(out) > 3 else None  # apply_fn(..., with_health=True)
  chex.assert_shape(logits, batch.action.shape + (None,))
  value_idx = value_index(cfg, batch.task_id)
  n = take(norm_values, value_idx)
  value_logits = None
  if len(out) > 4:   # a categorical head: each step's head's logits
    value_logits = jnp.take_along_axis(out[4], value_idx[..., None, None], axis=-2)[..., 0, :]
  values = popart.unnormalize(stats, n, value_idx)
  if cfg.reward_mode == 'h':
    raw_values = rewards_lib.h_inv(values)
  elif symlog_values(cfg):
    raw_values = vc.symexp(values)
  else:
    raw_values = values
  log_pi = jax.nn.log_softmax(logits[:-1])
  log_mu = jax.nn.log_softmax(batch.behaviour_logits[:-1])
  action = batch.action[:-1]
  return Evaluation(
      n=n, values=values, raw_values=raw_values, value_idx=value_idx,
      log_pi=log_pi, log_mu=log_mu, log_pi_a=take(log_pi, action), log_mu_a=take(log_mu, action),
      rewards=rewards_lib.transform_rewards(batch.reward[:-1], cfg.reward_mode),
      unit_max=unit_max, value_logits=value_logits)


def episode_aware(raw_values, rewards, discounts, first, gamma):
  """Transitions over unrolls that may cross episode boundaries.

  Transition t goes from x_t to x_{t+1}. The one from a terminal observation
  (a reset step: x_{t+1} is `first`) is masked out and given reward V(x_t),
  stopped from gradients, with discount 0, so its target equals its value: a
  truncated episode then bootstraps from V(x_terminal), a terminated one has
  discount 0 on its last action, and nothing leaks across the boundary.

  Args:
    raw_values: values in reward units [T + 1, B].
    rewards: rewards [T, B].
    discounts: 1 - terminated, [T, B].
    first: bool [T + 1, B], x_t starts an episode.
    gamma: the discount factor.

  Returns:
    (rewards, discounts * gamma, mask), each [T, B]; mask is 1 for real
    transitions and 0 for reset steps.
  """
  reset = first[1:]
  mask = 1.0 - reset.astype(jnp.float32)
  rewards = jnp.where(reset, jax.lax.stop_gradient(raw_values[:-1]), rewards)
  discounts = jnp.where(reset, 0.0, gamma * discounts)
  return rewards, discounts, mask


def global_sum(tree, axis_name: Optional[str]):
  """Sums per-device values over the devices of `axis_name`.

  Args:
    tree: a pytree of per-device sums.
    axis_name: the mapped axis to sum over; None for one device.

  Returns:
    `tree` summed over `axis_name` (psum), or `tree` as is without one.
  """
  return tree if axis_name is None else jax.lax.psum(tree, axis_name)


def num_valid(mask, axis_name: Optional[str] = None):
  """The global batch's number of valid steps: what per-step means divide by.

  Args:
    mask: 1 for valid steps, 0 otherwise, any shape.
    axis_name: the devices to sum over; None for one device.

  Returns:
    A scalar: the sum of `mask` over every device of `axis_name`, at least 1.
  """
  return jnp.maximum(global_sum(jnp.sum(mask), axis_name), 1.0)


def normalize(x, mask, axis_name: Optional[str] = None, eps: float = 1e-8):
  """Standardises the valid entries of x: (x - mean) / (std + eps).

  The mean and standard deviation are taken over the valid entries (mask 1)
  of the global batch, summed across `axis_name` devices, in two passes
  (mean, then squared deviations). Masked entries come out 0.

  Args:
    x: values, any shape.
    mask: 1 for valid entries, 0 otherwise, the shape of x.
    axis_name: the devices the statistics cover; None for one device.
    eps: added to the standard deviation.

  Returns:
    An array the shape of x.
  """
  count = num_valid(mask, axis_name)
  mean = global_sum(jnp.sum(mask * x), axis_name) / count
  # Two passes, as health.logit_spread: small advantages around a larger
  # mean would lose their spread to float32 rounding in E[x^2] - E[x]^2.
  s2 = global_sum(jnp.sum(mask * (x - mean) ** 2), axis_name)
  return mask * (x - mean) / (jnp.sqrt(s2 / count) + eps)


def normalize_per_task(x, mask, task_ids, num_tasks: int, axis_name: Optional[str] = None,
                       eps: float = 1e-8):
  """`normalize` within each task.

  The valid entries of task i (task_ids == i) get (x - mean_i) / (std_i + eps)
  over task i's valid entries only, so every task's advantages have mean 0 and
  std 1 whatever its reward scale. Statistics are global over `axis_name`.
  Masked entries come out 0; a task with one valid entry gets 0.

  Args:
    x: values, any shape.
    mask: 1 for valid entries, 0 otherwise, the shape of x.
    task_ids: int task of each entry, the shape of x, in [0, num_tasks).
    num_tasks: the number of tasks K.
    axis_name: the devices the statistics cover; None for one device.
    eps: added to each task's standard deviation.

  Returns:
    An array the shape of x.
  """
  moments = task_moments(x, mask, task_ids, num_tasks, axis_name)
  return normalize_with(x, mask, task_ids, moments, eps)


class TaskMoments(NamedTuple):
  """Each task's mean and standard deviation over some valid entries."""
  mean: jax.Array   # [K]
  std: jax.Array    # [K]; 0 for a task with no valid entry


def task_moments(x, mask, task_ids, num_tasks: int,
                 axis_name: Optional[str] = None) -> TaskMoments:
  """Each task's mean and standard deviation over its valid entries.

  Two passes (mean, then squared deviations), as `normalize`; sums are
  global over `axis_name`. A task with no valid entry gets mean 0, std 0.

  Args:
    x: values, any shape.
    mask: 1 for valid entries, 0 otherwise, the shape of x.
    task_ids: int task of each entry, the shape of x, in [0, num_tasks).
    num_tasks: the number of tasks K.
    axis_name: the devices the statistics cover; None for one device.

  Returns:
    TaskMoments with mean and std [K].
  """
  weights = jax.nn.one_hot(task_ids, num_tasks) * mask[..., None]       # [..., K]
  axes = tuple(range(x.ndim))
  count = jnp.maximum(global_sum(jnp.sum(weights, axis=axes), axis_name), 1.0)
  mean = global_sum(jnp.sum(weights * x[..., None], axis=axes), axis_name) / count
  s2 = global_sum(jnp.sum(weights * ((x[..., None] - mean) ** 2), axis=axes), axis_name)
  return TaskMoments(mean=mean, std=jnp.sqrt(s2 / count))


def normalize_with(x, mask, task_ids, moments: TaskMoments, eps: float = 1e-8):
  """(x - mean_i) / (std_i + eps) for the entries of each task i, with
  moments taken elsewhere (`task_moments`, for example over a larger batch).

  Args:
    x: values, any shape.
    mask: 1 for valid entries, 0 otherwise, the shape of x.
    task_ids: int task of each entry, the shape of x.
    moments: each task's mean and std [K].
    eps: added to each task's standard deviation.

  Returns:
    An array the shape of x; masked entries 0.
  """
  return mask * (x - moments.mean[task_ids]) / (moments.std[task_ids] + eps)


def task_sums(x, mask, task_ids, num_tasks: int):
  """Per-task sums of x over its valid entries, on this device.

  Args:
    x: values [T, B].
    mask: 1 for valid entries, 0 otherwise, [T, B].
    task_ids: int task of each entry [T, B], in [0, num_tasks).
    num_tasks: the number of tasks K.

  Returns:
    An array [K]: entry i is the sum of mask * x over the entries of task i.
    Not summed across devices.
  """
  weights = jax.nn.one_hot(task_ids, num_tasks) * mask[..., None]
  return jnp.sum(weights * x[..., None], axis=tuple(range(x.ndim)))


def entropy(log_pi):
  """The policy's entropy at each step.

  Args:
    log_pi: log-probabilities [..., A] (a log-softmax).

  Returns:
    -sum_a pi(a) log pi(a), an array [...].
  """
  return -jnp.sum(jnp.exp(log_pi) * log_pi, axis=-1)
