"""IMPALA: the V-trace actor-critic loss (Espeholt et al. 2018, arXiv 1802.01561) with per-task
PopArt (Hessel et al. 2019, arXiv 1809.04474), and the learner's update. Written for one device's
shard; sums cross `axis_name`; metrics are per valid step whatever `LossConfig.reduction`.
"""

import dataclasses
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from infra.settings import boolean, integer, one_of, setting
from rl import actor_critic as ac
from rl import health
from rl import minibatches
from rl import popart
from rl import sgd
from rl import value_classification as vc
from rl import vtrace
from rl.task_metrics import mean_metrics, task_metrics
from rl.actor_critic import LossConfig, LossOutput
from rl.types import Unroll

NAME = 'impala'
CONFIG_GROUP = 'vtrace'   # the run config's group of VTraceConfig's fields

ADVANTAGE_GROUPS = ('minibatch', 'task')

# The loss's terms, in the order of the by-term loss's rows (loss_fn(by_term=True)).
TERMS = ('policy', 'baseline', 'entropy')
# The gradients optimizer.clip_by='term' clips apart, as weights on TERMS.
CLIP_GROUPS = ((1.0, 0.0, 1.0), (0.0, 1.0, 0.0))
CLIP_GROUP_NAMES = ('policy', 'baseline')


@dataclasses.dataclass(frozen=True)
class VTraceConfig:
  """How the IMPALA update uses a batch (the config's `vtrace` group; read only when loss.name =
  'impala'). 1 epoch x 1 minibatch is IMPALA's one optimiser step per batch."""
  epochs: int = setting(1, 'passes over each batch', integer(1))
  minibatches: int = setting(
      1, "optimiser steps per pass: the batch's unrolls shuffled and cut in this many parts, "
      "V-trace taken with each step's params", integer(1))
  normalize_advantages: bool = setting(
      False, "the policy gradient's advantages mean 0, std 1 per minibatch (after PopArt's "
      'per-task scaling)', boolean)
  normalize_advantages_per: str = setting(
      'minibatch', "with normalize_advantages: over the whole 'minibatch', or each 'task''s "
      'steps in it apart', one_of(ADVANTAGE_GROUPS))
  balance_tasks: bool = setting(
      False, "minibatches deal each task's unrolls out evenly, not at random: a task's "
      'unrolls in the global minibatches differ in number by at most one per learner '
      'device, and a task with at least `minibatches` unrolls per device is in every '
      'minibatch', boolean)

  def problem(self):
    """Per-task normalisation needs normalisation on; balancing needs minibatches to deal into."""
    per = self.normalize_advantages_per
    if per == 'task' and self.normalize_advantages is False:
      return ('normalize_advantages_per', f"'{per}' needs vtrace.normalize_advantages=True "
              '(advantages are not normalised now)')
    if self.balance_tasks and self.minibatches == 1:
      return ('balance_tasks', 'needs vtrace.minibatches > 1 (one minibatch holds every '
              'unroll already)')
    return None


def settings(cfg: LossConfig) -> VTraceConfig:
  """`cfg.settings`: VTraceConfig's defaults for None; TypeError for any other type."""
  if cfg.settings is None:
    return VTraceConfig()
  if not isinstance(cfg.settings, VTraceConfig):
    raise TypeError(f'the IMPALA loss reads a VTraceConfig, not {type(cfg.settings).__name__}')
  return cfg.settings


def batch_split(v: VTraceConfig, per_device_batch: int, unroll_length: int):
  """('minibatches', why) when `v.minibatches` does not divide the unrolls of
  one learner device (minibatches hold whole unrolls); else None."""
  del unroll_length
  if per_device_batch % v.minibatches:
    return ('minibatches', f'{v.minibatches} minibatches of whole unrolls do not split the '
            f'{per_device_batch} unrolls of each learner device; use a divisor of '
            f'{per_device_batch}')
  return None


def loss_fn(apply_fn: Callable, cfg: LossConfig, axis_name: Optional[str] = None,
            by_term: bool = False) -> Callable:
  """The IMPALA loss: V-trace actor-critic with per-task PopArt.

  Targets v_s come from the network's own values (stopped), in reward units (h-space for reward mode
  'h'). With PopArt the statistics step on v_s and the value loss 0.5 (target - value)^2 uses the
  new statistics with outputs preserved (Hessel et al. 2019). Policy term: -min(rho_s, 1)
  (q_s - V(x_s)) / sigma_i log pi(a_s|x_s) (Espeholt et al. 2018, sec. 4.2), optionally normalised
  (VTraceConfig); plus the entropy bonus. A categorical head adds the cross-entropy against the
  projected target; without PopArt it works in symlog space and scales advantages by each task's
  max(1, P95 - P5) instead of sigma_i (rl/value_classification.py).

  Args:
    apply_fn: as rl/actor_critic.evaluate_unroll's.
    by_term: the loss is a [3, num_tasks] array instead: each term of TERMS over each task's steps,
      summing to the scalar loss (per-term clip, rl/sgd.py; per-task gradient norms).

  Returns:
    loss(params, stats, batch, entropy_cost=None) -> (loss, LossOutput).
    `entropy_cost` (traced, rl/optimizers.py) replaces cfg.entropy_cost.
  """
  v = settings(cfg)
  normalize_advantages = v.normalize_advantages
  per = v.normalize_advantages_per
  num_tasks = cfg.num_tasks
  if num_tasks is None:
    if by_term or (normalize_advantages and per == 'task'):
      raise ValueError('LossConfig.num_tasks is None: the loss by term and per-task advantages '
                       "need the run's task count")
    num_tasks = 1
  value = cfg.value
  symlog = ac.symlog_values(cfg)
  centres = vc.support(value.bins, value.limit) if value.categorical else None

  def loss(params, stats: popart.Stats, batch: Unroll, entropy_cost=None):
    by_task, out = terms(params, stats, batch, entropy_cost)
    return (by_task if by_term else jnp.sum(by_task)), out

  def terms(params, stats: popart.Stats, batch: Unroll, entropy_cost=None):
    entropy_weight = cfg.entropy_cost if entropy_cost is None else entropy_cost
    t = vtrace.targets(apply_fn, cfg, params, stats, batch)
    e, rhos, vs, qs, mask = t.evaluation, t.rhos, t.vs, t.qs, t.mask

    task_tm1 = e.value_idx[:-1]
    # Each step's task (not its value head: that is 0 without PopArt). An id
    # past the count (agents/update_checks stops such a batch) is counted as
    # the last task's, so the per-task sums still hold every valid step.
    task = jnp.clip(batch.task_id[:-1], 0, num_tasks - 1)
    if cfg.popart_enabled:
      new_stats, stats_step = popart.update_stats_and_step(
          stats, vs, task_tm1, mask, cfg.popart_beta, axis_name, cfg.popart_per_sample)
    elif symlog:   # each task's return range, for its advantage scale
      new_stats = vc.update_return_range(stats, t.raw_vs, task, mask, value.range_rate, axis_name)
    else:
      new_stats = stats
    # The loss the rescaled network would see (outputs preserved).
    old_stats = popart.preserved_from(stats, new_stats) if value.categorical else stats
    norm_value = popart.rescaled_value(old_stats, new_stats, e.n[:-1], task_tm1)
    norm_target = popart.normalize(new_stats, vs, task_tm1)
    value_steps = 0.5 * (norm_target - norm_value) ** 2
    if value.categorical:
      # Cross-entropy against the normalised target projected on the support;
      # the squared error above then trains only the head's affine.
      value_ce = vc.cross_entropy(e.value_logits[:-1], vc.project(
          value.head, jax.lax.stop_gradient(norm_target), centres, value.sigma_ratio))
      value_steps = value_steps + value_ce
    baseline_loss = jnp.sum(mask * value_steps)

    if symlog:   # rho_s (q_s - V(x_s)) / max(1, P95 - P5) of the task, reward units
      pg_advantage = t.advantage / vc.advantage_scale(new_stats)[task]
    else:        # rho_s (q_s - V(x_s)) / sigma_i: the per-task normalised advantage
      pg_advantage = popart.scale(new_stats, t.advantage, task_tm1)
    raw_advantage = pg_advantage
    if normalize_advantages and per == 'task':
      pg_advantage = ac.normalize_per_task(pg_advantage, mask, task, num_tasks, axis_name)
    elif normalize_advantages:
      # The policy term keeps its size against the entropy and value terms
      # while the advantages shrink as the value fits.
      pg_advantage = ac.normalize(pg_advantage, mask, axis_name)
    pg_steps = -mask * pg_advantage * e.log_pi_a
    pg_loss = jnp.sum(pg_steps)

    entropy = ac.entropy(e.log_pi)
    entropy_loss = -jnp.sum(mask * entropy)

    total = (pg_loss + cfg.baseline_cost * baseline_loss
             + entropy_weight * entropy_loss)
    num_valid = ac.num_valid(mask, axis_name)
    divisor = num_valid if cfg.reduction == 'mean' else 1.0
    reduced = total / divisor
    # The same loss by term and task ([3, K]): it sums to `reduced`.
    by_task = jnp.stack([
        ac.task_sums(pg_steps, mask, task, num_tasks),
        cfg.baseline_cost * ac.task_sums(value_steps, mask, task, num_tasks),
        -entropy_weight * ac.task_sums(entropy, mask, task, num_tasks)]) / divisor
    metrics = _metrics(_Parts(
        total=total, pg_loss=pg_loss, baseline_loss=baseline_loss, entropy_loss=entropy_loss,
        entropy=entropy, raw_advantage=raw_advantage, norm_target=norm_target,
        norm_value=norm_value, evaluation=e, rhos=rhos, mask=mask, task=task,
        value_ce=value_ce if value.categorical else None,
        stats_step=stats_step if cfg.popart_enabled else None), num_valid, num_tasks, axis_name)
    extras = {'vs': vs, 'qs': qs, 'mask': mask, 'pg_advantage': pg_advantage,
              'raw_advantage': raw_advantage,
              'norm_target': norm_target, 'norm_value': norm_value, 'rhos': rhos,
              'log_pi': e.log_pi}
    return by_task, LossOutput(reduced, new_stats, metrics, extras, old_stats)

  return loss


class _Parts(NamedTuple):
  """What the loss computed that its metrics read: sums of this device's
  valid steps, and [T, B] arrays."""
  total: jax.Array
  pg_loss: jax.Array
  baseline_loss: jax.Array
  entropy_loss: jax.Array
  entropy: jax.Array
  raw_advantage: jax.Array    # the policy term's advantages before any normalisation
  norm_target: jax.Array
  norm_value: jax.Array
  evaluation: ac.Evaluation
  rhos: jax.Array
  mask: jax.Array
  task: jax.Array
  value_ce: Optional[jax.Array]    # a categorical head's cross-entropy per step
  stats_step: Optional[jax.Array]  # PopArt's step per task


def _metrics(p: _Parts, num_valid, num_tasks: int, axis_name: Optional[str]) -> dict:
  """The loss's metrics, each the global figure per valid step."""
  e, mask = p.evaluation, p.mask
  log_mu, log_pi = e.log_mu, e.log_pi
  sums = {
      'loss/total': p.total,
      'loss/policy': p.pg_loss,
      'loss/baseline': p.baseline_loss,
      'loss/entropy': p.entropy_loss,
      'entropy': jnp.sum(mask * p.entropy),
      'rho_mean': jnp.sum(mask * p.rhos),
      'pg_advantage_rms': jnp.sum(mask * p.raw_advantage ** 2),  # a mean square until the root
      # Share of steps whose importance weight the V-trace clip at 1 cuts.
      'rho_clipped': jnp.sum(mask * (p.rhos > 1.0 + 1e-3)),
      # KL(mu || pi): the policy lag times the update size.
      'kl_behaviour': jnp.sum(mask * jnp.sum(
          jnp.exp(log_mu) * (log_mu - jax.lax.stop_gradient(log_pi)), axis=-1)),
      'value_mean': jnp.sum(mask * e.values[:-1]),
  }
  if p.value_ce is not None:
    sums['loss/value_ce'] = jnp.sum(mask * p.value_ce)
  # Sums of per-device sums: every device reports the global figure.
  metrics = ac.global_sum({k: v / num_valid for k, v in sums.items()}, axis_name)
  # The advantages' size before any normalisation: the policy term's
  # natural weight against the entropy bonus.
  metrics['pg_advantage_rms'] = jnp.sqrt(metrics['pg_advantage_rms'])
  metrics.update(health.metrics(e.unit_max, log_pi, mask, axis_name))
  if p.stats_step is not None:
    metrics[popart.STEP_METRIC] = p.stats_step
  if num_tasks > 1:
    metrics.update(task_metrics(mask * (p.norm_target - p.norm_value) ** 2, p.norm_target,
                                p.raw_advantage, mask, p.task, num_tasks, axis_name))
  return metrics


def make_update(apply_fn: Callable, cfg: LossConfig, optimizer: optax.GradientTransformation,
                value_head: str, axis_name: Optional[str], seed: int = 0,
                max_grad_norm: float = float('inf')) -> Callable:
  """The IMPALA learner's update of one device's shard.

  Each minibatch holds whole unrolls and takes its V-trace targets and PopArt
  step with its own step's params, so V-trace corrects for the policy's move.

  Args:
    value_head: the top-level param name of the head PopArt rescales.
    seed: with the step, seeds the minibatch shuffles (same on every device).
    max_grad_norm: the clip for an optimiser state without one.

  Returns:
    The update of rl/actor_critic.Learner.make_update; metrics are means
    over the optimiser steps plus 'kl_update' (rl/health.update_kl).
  """
  v = settings(cfg)
  base_loss = loss_fn(apply_fn, cfg, axis_name, by_term=cfg.clip_per_term)
  sgd_step = sgd.make_sgd_step(
      base_loss, optimizer, value_head,
      axis_name, max_grad_norm, moves_statistics=cfg.popart_enabled,
      clip_groups=(CLIP_GROUPS, CLIP_GROUP_NAMES) if cfg.clip_per_term else None)
  def update(params, opt_state, stats, batch: Unroll, step, state=()):
    def scan_step(carry, minibatch):
      params, opt_state, stats = carry
      params, opt_state, out = sgd_step(params, opt_state, stats, minibatch)
      return (params, opt_state, out.new_stats), (out.metrics, out.extras['log_pi'])

    if v.epochs == 1 and v.minibatches == 1:
      (params, opt_state, new_stats), (metrics, log_pi) = scan_step(
          (params, opt_state, stats), batch)
      first = batch
    else:
      # The same key on every device; balanced minibatches are rotated by the
      # device's index (minibatches.unroll_order).
      shift = jax.lax.axis_index(axis_name) if (v.balance_tasks and axis_name) else 0
      parts = [minibatches.split_unrolls(batch, v.minibatches, k, v.balance_tasks, shift)
               for k in minibatches.shuffle_keys(seed, step, v.epochs)]
      stacked = jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)
      (params, opt_state, new_stats), (step_metrics, log_pis) = jax.lax.scan(
          scan_step, (params, opt_state, stats), stacked)
      metrics = mean_metrics(step_metrics)
      first, log_pi = jax.tree.map(lambda x: x[0], (stacked, log_pis))
    metrics['kl_update'] = health.update_kl(apply_fn, params, new_stats, first, log_pi, axis_name)
    return params, opt_state, new_stats, metrics, state

  return update


LEARNER = ac.Learner(
    name=NAME, config_group=CONFIG_GROUP, settings_type=VTraceConfig, make_update=make_update,
    optimizer_steps=lambda v: v.epochs * v.minibatches, batch_split=batch_split,
    term_loss=loss_fn, terms=TERMS, categorical_value=True)
