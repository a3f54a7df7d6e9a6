"""The IMPALA loss with V-trace targets and per-task PopArt normalisation.

Written for one device's shard of the batch; statistics and counts are summed
across `axis_name` so every device sees global PopArt updates.

Reduction: losses are summed over time and batch, as in IMPALA's released code
(its RMSProp epsilon of 0.01 assumes summed gradients), or with
`reduction='mean'` divided by the global batch's number of valid steps, as in
A2C's code. Reported loss metrics are per valid step either way.
"""

from typing import Callable, NamedTuple, Optional

import chex
import jax
import jax.numpy as jnp
import rlax

from rl import health
from rl import popart
from rl import rewards as rewards_lib
from rl.types import Unroll


LOSS_NAMES = ('impala', 'ppo')
PPO_VALUE_TARGETS = ('gae', 'vtrace')
PPO_SPLITS = ('steps', 'unrolls')


class PPOConfig(NamedTuple):
  """rl/ppo.py's settings (the config's `ppo` group; configs/common.py)."""
  epochs: int = 4
  minibatches: int = 4
  clip_epsilon: float = 0.1
  value_clip_epsilon: float = 0.1   # 0: the value loss is not clipped
  gae_lambda: float = 0.95
  value_targets: str = 'gae'        # 'gae' or 'vtrace'
  normalize_advantages: bool = True
  split: str = 'steps'              # minibatches of single steps, or of whole unrolls


class VTraceConfig(NamedTuple):
  """How the IMPALA update uses a batch (the config's `vtrace` group)."""
  epochs: int = 1                   # passes over each batch
  minibatches: int = 1              # optimiser steps per pass, on whole unrolls
  normalize_advantages: bool = False  # the policy gradient's advantages: mean 0, std 1 per minibatch


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
  name: str = 'impala'              # 'impala' (impala_loss) or 'ppo' (rl/ppo.py)
  ppo: PPOConfig = PPOConfig()
  vtrace: VTraceConfig = VTraceConfig()


def config_from(config) -> LossConfig:
  """The LossConfig of a run config (ml_collections)."""
  p, v = config.ppo, config.vtrace
  return LossConfig(
      discount=config.discount, baseline_cost=config.baseline_cost,
      entropy_cost=config.entropy_cost, reward_mode=config.reward_mode,
      popart_enabled=config.popart.enabled, popart_beta=config.popart.beta,
      reduction=config.loss_reduction, name=config.loss.name,
      ppo=PPOConfig(epochs=p.epochs, minibatches=p.minibatches, clip_epsilon=p.clip_epsilon,
                    value_clip_epsilon=p.value_clip_epsilon, gae_lambda=p.gae_lambda,
                    value_targets=p.value_targets,
                    normalize_advantages=p.normalize_advantages, split=p.split),
      vtrace=VTraceConfig(epochs=v.epochs, minibatches=v.minibatches,
                          normalize_advantages=v.normalize_advantages))


def normalize(x, mask, axis_name: Optional[str] = None, eps: float = 1e-8):
  """(x - mean) / (std + eps) over the valid entries (mask 1) of x, the
  statistics global over `axis_name`; masked entries come out 0."""
  count, s1 = jnp.sum(mask), jnp.sum(mask * x)
  if axis_name is not None:
    count, s1 = jax.lax.psum((count, s1), axis_name)
  count = jnp.maximum(count, 1.0)
  mean = s1 / count
  # Two passes, as health.logit_spread: small advantages around a larger
  # mean would lose their spread to float32 rounding in E[x^2] - E[x]^2.
  s2 = jnp.sum(mask * (x - mean) ** 2)
  if axis_name is not None:
    s2 = jax.lax.psum(s2, axis_name)
  return mask * (x - mean) / (jnp.sqrt(s2 / count) + eps)


class LossOutput(NamedTuple):
  loss: jax.Array
  new_stats: popart.Stats
  metrics: dict
  extras: dict    # per-step intermediates for tests and analysis (dead code under jit)


def vtrace_returns(values, rewards, discounts, rhos, lambda_: float = 1.0):
  """V-trace targets v_s and q_s = r_s + gamma_s v_{s+1}, time-major [T, B].

  `values` has T+1 rows; rho_bar = c_bar = 1; `lambda_` < 1 mixes in
  shorter returns (c_s = lambda min(1, rho_s)). rlax works on one
  trajectory, so it is vmapped over the batch axis.
  """
  vtrace = jax.vmap(
      lambda v, r, d, rho: rlax.vtrace_td_error_and_advantage(
          v_tm1=v[:-1], v_t=v[1:], r_t=r, discount_t=d, rho_tm1=rho,
          lambda_=lambda_, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0),
      in_axes=1, out_axes=1)
  out = vtrace(values, rewards, discounts, rhos)
  vs = jax.lax.stop_gradient(values[:-1] + out.errors)
  return vs, jax.lax.stop_gradient(out.q_estimate)


def episode_aware_vtrace(raw_values, rewards, discounts, first, rhos, gamma,
                         lambda_: float = 1.0):
  """V-trace over unrolls that may cross episode boundaries.

  raw_values [T+1, B]; rewards, discounts (1 - terminated), rhos [T, B];
  first [T+1, B]. Transition t goes from x_t to x_{t+1}. The one from a
  terminal observation (a reset step: x_{t+1} is `first`) is masked out and
  given reward V(x_t) with discount 0, so its target equals its value: a
  truncated episode then bootstraps from V(x_terminal), a terminated one has
  discount 0 on its last action, and nothing leaks across the boundary.
  Returns (vs, qs, mask), each [T, B].
  """
  reset = first[1:]
  mask = 1.0 - reset.astype(jnp.float32)
  rewards = jnp.where(reset, jax.lax.stop_gradient(raw_values[:-1]), rewards)
  discounts = jnp.where(reset, 0.0, gamma * discounts)
  vs, qs = vtrace_returns(jax.lax.stop_gradient(raw_values), rewards, discounts, rhos, lambda_)
  return vs, qs, mask


def impala_loss(apply_fn: Callable, cfg: LossConfig,
                axis_name: Optional[str] = None) -> Callable:
  """Returns loss_fn(params, stats, batch, entropy_cost=None) -> (loss, LossOutput).

  `apply_fn(params, stats, obs, first, core_state)` returns logits [T+1, B, A]
  and normalised values [T+1, B, K]. `entropy_cost` (a traced scalar: the
  optimiser state's, rl/optimizers.py) replaces cfg.entropy_cost when given.
  """

  def loss_fn(params, stats: popart.Stats, batch: Unroll, entropy_cost=None):
    entropy_weight = cfg.entropy_cost if entropy_cost is None else entropy_cost
    out = apply_fn(params, stats, batch.obs, batch.first, batch.core_state)
    logits, norm_values = out[0], out[1]
    unit_max = out[3] if len(out) > 3 else None  # apply_fn(..., with_health=True)
    t_plus_1, b = batch.action.shape
    chex.assert_shape(logits, (t_plus_1, b, None))
    value_idx = batch.task_id if cfg.popart_enabled else jnp.zeros_like(batch.task_id)
    n = jnp.take_along_axis(norm_values, value_idx[..., None], axis=-1)[..., 0]
    values = popart.unnormalize(stats, n, value_idx)  # in h-space for mode 'h'
    raw_values = rewards_lib.h_inv(values) if cfg.reward_mode == 'h' else values

    log_pi = jax.nn.log_softmax(logits[:-1])
    log_mu = jax.nn.log_softmax(batch.behaviour_logits[:-1])
    action = batch.action[:-1]
    log_pi_a = jnp.take_along_axis(log_pi, action[..., None], axis=-1)[..., 0]
    log_mu_a = jnp.take_along_axis(log_mu, action[..., None], axis=-1)[..., 0]
    rhos = jnp.exp(jax.lax.stop_gradient(log_pi_a) - log_mu_a)

    r = rewards_lib.transform_rewards(batch.reward[:-1], cfg.reward_mode)
    vs, qs, mask = episode_aware_vtrace(raw_values, r, batch.discount[:-1],
                                        batch.first, rhos, cfg.discount)
    if cfg.reward_mode == 'h':
      vs, qs = rewards_lib.h(vs), rewards_lib.h(qs)

    task_tm1 = value_idx[:-1]
    if cfg.popart_enabled:
      new_stats = popart.update_stats(stats, vs, task_tm1, mask,
                                      cfg.popart_beta, axis_name)
    else:
      new_stats = stats
    # Output of the value head after the output-preserving rescale, so the
    # loss is the one the rescaled network would see.
    sigma_old = popart.sigma(stats)[task_tm1]
    sigma_new = popart.sigma(new_stats)[task_tm1]
    norm_value = (sigma_old * n[:-1] + stats['mu'][task_tm1]
                  - new_stats['mu'][task_tm1]) / sigma_new
    norm_target = popart.normalize(new_stats, vs, task_tm1)
    baseline_loss = 0.5 * jnp.sum(mask * (norm_target - norm_value) ** 2)

    # rho_s (q_s - V(x_s)) / sigma_i: the per-task normalised advantage.
    pg_advantage = jnp.minimum(rhos, 1.0) * (qs - values[:-1]) / sigma_new
    pg_advantage = jax.lax.stop_gradient(pg_advantage)
    raw_advantage_sq = jnp.sum(mask * pg_advantage ** 2)
    if cfg.vtrace.normalize_advantages:
      # Per (mini)batch, over the valid steps of every device: the policy
      # term keeps a fixed size against the entropy bonus and the value
      # loss while the advantages shrink as the value fits (docs/pong.md).
      pg_advantage = normalize(pg_advantage, mask, axis_name)
    pg_loss = -jnp.sum(mask * pg_advantage * log_pi_a)

    entropy = -jnp.sum(jnp.exp(log_pi) * log_pi, axis=-1)
    entropy_loss = -jnp.sum(mask * entropy)

    total = (pg_loss + cfg.baseline_cost * baseline_loss
             + entropy_weight * entropy_loss)
    num_valid = jnp.sum(mask)
    if axis_name is not None:
      num_valid = jax.lax.psum(num_valid, axis_name)
    num_valid = jnp.maximum(num_valid, 1.0)
    loss = total / num_valid if cfg.reduction == 'mean' else total
    metrics = {
        'loss/total': total / num_valid,
        'loss/policy': pg_loss / num_valid,
        'loss/baseline': baseline_loss / num_valid,
        'loss/entropy': entropy_loss / num_valid,
        'entropy': jnp.sum(mask * entropy) / num_valid,
        'rho_mean': jnp.sum(mask * rhos) / num_valid,
        'pg_advantage_rms': raw_advantage_sq / num_valid,  # a mean square until the root below
        # Share of steps whose importance weight the V-trace clip at 1 cuts.
        'rho_clipped': jnp.sum(mask * (rhos > 1.0 + 1e-3)) / num_valid,
        # KL(mu || pi): how far the learner's policy has moved from the
        # behaviour policy that acted (policy lag times update size).
        'kl_behaviour': jnp.sum(mask * jnp.sum(
            jnp.exp(log_mu) * (log_mu - jax.lax.stop_gradient(log_pi)), axis=-1)) / num_valid,
        'value_mean': jnp.sum(mask * values[:-1]) / num_valid,
    }
    if axis_name is not None:
      # Sums of per-device sums: every device reports the global figure.
      metrics = jax.lax.psum(metrics, axis_name)
    # The advantages' size before any normalisation: the policy term's
    # natural weight against the entropy bonus.
    metrics['pg_advantage_rms'] = jnp.sqrt(metrics['pg_advantage_rms'])
    metrics.update(health.metrics(unit_max, log_pi, mask, axis_name))
    extras = {'vs': vs, 'qs': qs, 'mask': mask, 'pg_advantage': pg_advantage,
              'norm_target': norm_target, 'norm_value': norm_value, 'rhos': rhos,
              'log_pi': log_pi}
    return loss, LossOutput(loss, new_stats, metrics, extras)

  return loss_fn
