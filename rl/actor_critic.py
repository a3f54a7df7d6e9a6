"""What the learners (rl/impala.py, rl/ppo.py) share: their settings, the learner table's entry, one
forward pass over an unroll, episode masking and means over the valid steps of the global batch.

Shapes are time-major: an unroll's T + 1 steps, T transitions.
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
  # 'sum' over time and batch (IMPALA's code) or 'mean' over the global batch's valid steps (A2C's):
  # 1/N the size, which the clip and RMSProp's epsilon see.
  reduction: str = 'sum'
  name: str = 'impala'   # the learner (rl/algorithms.py): 'impala', 'ppo' or one registered
  settings: Any = None   # the learner's own settings (rl/impala.VTraceConfig, rl/ppo.PPOConfig,
                         # ...: its config group); None: its defaults
  # Tasks in the run: the by-term loss, per-task normalisation and metrics
  # need it (None: an error there; the run spec always gives it).
  num_tasks: Optional[int] = None
  # optimizer.clip_by='term' (V-trace only).
  clip_per_term: bool = False
  # PopArt's step per valid target (popart.step_per='sample') instead of per update.
  popart_per_sample: bool = False
  # The value head and its loss (rl/value_classification.py); the default: a scalar head.
  value: vc.ValueConfig = vc.ValueConfig()


class Learner(NamedTuple):
  """A learner as rl/algorithms.py's table holds it.

  Attributes:
    make_update: (apply_fn, loss_cfg, optimizer, value_head, axis_name,
      seed, max_grad_norm) -> update(params, opt_state, stats, batch, step,
      state) -> (params, opt_state, new_stats, metrics, state): `state` is
      the algorithm's (`init_state`; () for none), returned as it is if kept.
    optimizer_steps: settings -> optimiser steps per update (the
      learning-rate schedule counts them).
    batch_split: (settings, unrolls per learner device, unroll length) ->
      None, or (field, why) when its minibatches cannot cut a device's shard.
    settings_type: its settings dataclass (infra/settings.py), read from `LossConfig.settings`.
    init_state: params -> the state kept between updates and checkpointed;
      None: it keeps none.
    term_loss: (apply_fn, loss_cfg, axis_name=None, by_term=False) -> its loss(params, stats, batch,
      entropy_cost=None) -> (loss, LossOutput), with by_term a [len(terms), num_tasks] array of each
      term over each task's steps summing to the loss (rl/impala.loss_fn), linear in baseline_cost
      and entropy_cost; what optimizer.clip_by='term', the task gradient report and
      launch/diagnose_update.py need. None: it has none.
    terms: the rows of its by-term loss, 'policy' and 'baseline' among them.
    categorical_value: it trains a categorical value head (value.head).
    network_check: (settings, the network is recurrent) -> None, or (field,
      why) when its settings cannot train that network.
  """
  name: str
  config_group: str
  make_update: Callable[..., Callable]
  optimizer_steps: Callable[[Any], int]
  batch_split: Callable[[Any, int, int], Optional[Tuple[str, str]]]
  settings_type: type
  init_state: Optional[Callable[[Any], Any]] = None
  term_loss: Optional[Callable[..., Callable]] = None
  terms: Tuple[str, ...] = ()
  categorical_value: bool = False
  network_check: Optional[Callable[[Any, bool], Optional[Tuple[str, str]]]] = None

  @property
  def by_term(self) -> bool:
    """Whether its loss splits by term and task (`term_loss`)."""
    return self.term_loss is not None

  def read_settings(self, group, check: bool = True):
    """Its settings of its config group, or a SettingsError naming the first bad
    field; `check=False` skips the fields' checks."""
    return settings_lib.read(self.settings_type, group, self.config_group, check=check)


class LossOutput(NamedTuple):
  loss: jax.Array
  new_stats: popart.Stats
  metrics: dict
  extras: dict    # per-step intermediates for tests and analysis (dead code under jit)
  # The statistics the value head's outputs are preserved from (rl/sgd.py);
  # None: those the loss started from.
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
  """The value head each step reads: its task's with PopArt, else head 0."""
  return task_id if cfg.popart_enabled else jnp.zeros_like(task_id)


def symlog_values(cfg: LossConfig) -> bool:
  """Whether values are learnt in symlog space: a categorical head without
  PopArt (rl/value_classification.py)."""
  return cfg.value.categorical and not cfg.popart_enabled


def take(x: jax.Array, index: jax.Array) -> jax.Array:
  """x[..., index]: one entry of the last axis per element (index [...], x [..., N])."""
  return jnp.take_along_axis(x, index[..., None], axis=-1)[..., 0]


def evaluate_unroll(apply_fn: Callable, cfg: LossConfig, params, stats: popart.Stats,
                    batch: Unroll) -> Evaluation:
  """Runs the network over an unroll and takes out what both losses use.

  Values are read from each step's task head, unnormalised with the PopArt statistics and mapped to
  reward units (h^-1, or symexp for `symlog_values`). Nothing is stopped from gradients here.

  Args:
    apply_fn: (params, stats, obs, first, core_state) -> (logits [T+1, B, A],
      normalised values [T+1, B, K], _, unit maxima (with health),
      categorical logits [T+1, B, K, bins] (a categorical head)).
    batch: the unroll, [T + 1, B, ...].

  Returns:
    An Evaluation (shapes on its fields); unit_max and value_logits None when
    `apply_fn` does not give them.
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

  The transition out of a terminal observation (x_{t+1} is `first`) is masked
  out and given reward V(x_t) (stopped) and discount 0, so its target equals
  its value and nothing leaks across the boundary.

  Args:
    raw_values: [T + 1, B], reward units.
    rewards, discounts: [T, B]; discounts is 1 - terminated.
    first: bool [T + 1, B].

  Returns:
    (rewards, gamma * discounts, mask), each [T, B]; mask 0 on reset steps.
  """
  reset = first[1:]
  mask = 1.0 - reset.astype(jnp.float32)
  rewards = jnp.where(reset, jax.lax.stop_gradient(raw_values[:-1]), rewards)
  discounts = jnp.where(reset, 0.0, gamma * discounts)
  return rewards, discounts, mask


def global_sum(tree, axis_name: Optional[str]):
  """`tree` summed over the devices of `axis_name` (psum); as is for None."""
  return tree if axis_name is None else jax.lax.psum(tree, axis_name)


def num_valid(mask, axis_name: Optional[str] = None):
  """The global batch's number of valid steps (sum of `mask`), at least 1."""
  return jnp.maximum(global_sum(jnp.sum(mask), axis_name), 1.0)


def normalize(x, mask, axis_name: Optional[str] = None, eps: float = 1e-8):
  """(x - mean) / (std + eps) over the valid entries of the global batch;
  masked entries come out 0."""
  count = num_valid(mask, axis_name)
  mean = global_sum(jnp.sum(mask * x), axis_name) / count
  # Two passes, as health.logit_spread: small advantages around a larger
  # mean would lose their spread to float32 rounding in E[x^2] - E[x]^2.
  s2 = global_sum(jnp.sum(mask * (x - mean) ** 2), axis_name)
  return mask * (x - mean) / (jnp.sqrt(s2 / count) + eps)


def normalize_per_task(x, mask, task_ids, num_tasks: int, axis_name: Optional[str] = None,
                       eps: float = 1e-8):
  """`normalize` within each task (task_ids in [0, num_tasks))."""
  moments = task_moments(x, mask, task_ids, num_tasks, axis_name)
  return normalize_with(x, mask, task_ids, moments, eps)


class TaskMoments(NamedTuple):
  """Each task's mean and standard deviation over some valid entries."""
  mean: jax.Array   # [K]
  std: jax.Array    # [K]; 0 for a task with no valid entry


def task_moments(x, mask, task_ids, num_tasks: int,
                 axis_name: Optional[str] = None) -> TaskMoments:
  """Each task's mean and std [K] over its valid entries, global over
  `axis_name`; a task with none gets 0, 0."""
  weights = jax.nn.one_hot(task_ids, num_tasks) * mask[..., None]       # [..., K]
  axes = tuple(range(x.ndim))
  count = jnp.maximum(global_sum(jnp.sum(weights, axis=axes), axis_name), 1.0)
  mean = global_sum(jnp.sum(weights * x[..., None], axis=axes), axis_name) / count
  s2 = global_sum(jnp.sum(weights * ((x[..., None] - mean) ** 2), axis=axes), axis_name)
  return TaskMoments(mean=mean, std=jnp.sqrt(s2 / count))


def normalize_with(x, mask, task_ids, moments: TaskMoments, eps: float = 1e-8):
  """(x - mean_i) / (std_i + eps) for the entries of each task i, with moments
  taken elsewhere (`task_moments`); masked entries 0."""
  return mask * (x - moments.mean[task_ids]) / (moments.std[task_ids] + eps)


def task_sums(x, mask, task_ids, num_tasks: int):
  """[K]: the sum of mask * x over each task's entries, on this device only."""
  weights = jax.nn.one_hot(task_ids, num_tasks) * mask[..., None]
  return jnp.sum(weights * x[..., None], axis=tuple(range(x.ndim)))


def entropy(log_pi):
  """-sum_a pi(a) log pi(a) of log-probabilities [..., A]; shape [...]."""
  return -jnp.sum(jnp.exp(log_pi) * log_pi, axis=-1)
