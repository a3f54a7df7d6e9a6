"""PPO (Schulman et al. 2017) with per-task PopArt, on the actors' unrolls.

The same unrolls, PopArt head and sharded update as the IMPALA loss
(rl/losses.py); what differs is how a batch is used:

1. `targets_fn`: one forward pass over the whole batch with the current
   params gives the values the advantages and value targets start from:
   GAE(lambda) (`value_targets='gae'`, PPO's own) or V-trace(lambda) with
   the behaviour policy's importance weights (`'vtrace'`), over the same
   episode-aware transitions as IMPALA (a reset step is masked, gets reward
   V(x_terminal) and discount 0). PopArt's statistics move on these targets
   and the value head is rescaled once (outputs preserved); the value
   targets and the start-of-update values are then in the new normalised
   units, and each advantage is divided by its task's sigma (PopArt-PPO).
2. `loss_fn`, on each of `epochs x minibatches` minibatches: the clipped
   surrogate with the behaviour policy's log-probabilities,
   -min(r A, clip(r, 1 - eps, 1 + eps) A) with r = pi(a|x) / mu(a|x), the
   advantages optionally normalised over the minibatch (cleanrl), a value
   loss on the normalised targets, optionally clipped around the
   start-of-update value, and the entropy bonus.

With one epoch, one minibatch, the behaviour policy equal to the learner's
and no clip active (r = 1 at the first step), the surrogate's gradient is
the plain policy gradient sum A grad log pi (tests/test_ppo.py).

Shapes are time-major: values [T + 1, B], everything per transition [T, B].
Written for one device's shard; global sums cross `axis_name`.
"""

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from rl import health
from rl import losses
from rl import popart
from rl import rewards as rewards_lib
from rl.types import Unroll

class Targets(NamedTuple):
  """Per transition [T, B]: what every minibatch of one update shares."""
  advantage: jax.Array         # per-task normalised: A / sigma_i
  norm_target: jax.Array       # value target, normalised with the new statistics
  old_norm_value: jax.Array    # the rescaled head's value at the start of the update
  behaviour_log_prob: jax.Array  # log mu(a_t | x_t)
  mask: jax.Array              # 1 for real transitions, 0 for reset steps


def gae(values, rewards, discounts, lambda_):
  """Generalised advantage estimates (Schulman et al. 2016), time-major.

  values [T + 1, B]; rewards, discounts [T, B] (discount = gamma, or 0 at a
  termination). delta_t = r_t + d_t V_{t+1} - V_t and
  A_t = delta_t + d_t lambda A_{t+1}, with A_T = 0 beyond the unroll (the
  last value is the bootstrap). Returns A [T, B].
  """
  deltas = rewards + discounts * values[1:] - values[:-1]

  def step(next_advantage, x):
    delta, discount = x
    advantage = delta + discount * lambda_ * next_advantage
    return advantage, advantage

  _, advantages = jax.lax.scan(step, jnp.zeros_like(values[0]), (deltas, discounts),
                               reverse=True)
  return advantages


def _episode_aware(raw_values, rewards, discounts, first, gamma):
  """IMPALA's transitions (losses.episode_aware_vtrace): a reset step, whose
  next observation is `first`, gets reward V(x_t) and discount 0, so its
  target is its own value and nothing crosses the episode boundary."""
  reset = first[1:]
  mask = 1.0 - reset.astype(jnp.float32)
  rewards = jnp.where(reset, raw_values[:-1], rewards)
  discounts = jnp.where(reset, 0.0, gamma * discounts)
  return rewards, discounts, mask


def targets_fn(apply_fn: Callable, cfg: losses.LossConfig, axis_name: Optional[str] = None):
  """Returns targets(params, stats, batch) -> (new_stats, Targets, metrics).

  `params` are the learner's before the update; the caller rescales the
  value head for `new_stats` (popart.preserve_outputs) before the epochs.
  """
  p = cfg.ppo

  def targets(params, stats: popart.Stats, batch: Unroll):
    out = apply_fn(params, stats, batch.obs, batch.first, batch.core_state)
    logits, norm_values = jax.lax.stop_gradient(out[0]), jax.lax.stop_gradient(out[1])
    unit_max = out[3] if len(out) > 3 else None
    value_idx = batch.task_id if cfg.popart_enabled else jnp.zeros_like(batch.task_id)
    n = jnp.take_along_axis(norm_values, value_idx[..., None], axis=-1)[..., 0]
    values = popart.unnormalize(stats, n, value_idx)  # in h-space for mode 'h'
    raw_values = rewards_lib.h_inv(values) if cfg.reward_mode == 'h' else values

    action = batch.action[:-1]
    log_pi = jax.nn.log_softmax(logits[:-1])
    log_mu = jax.nn.log_softmax(batch.behaviour_logits[:-1])
    log_mu_a = jnp.take_along_axis(log_mu, action[..., None], axis=-1)[..., 0]
    r = rewards_lib.transform_rewards(batch.reward[:-1], cfg.reward_mode)

    if p.value_targets == 'gae':
      rewards, discounts, mask = _episode_aware(raw_values, r, batch.discount[:-1],
                                                batch.first, cfg.discount)
      value_target = gae(raw_values, rewards, discounts, p.gae_lambda) + raw_values[:-1]
      policy_target = value_target              # A = G^lambda - V
    else:
      log_pi_a = jnp.take_along_axis(log_pi, action[..., None], axis=-1)[..., 0]
      rhos = jnp.exp(log_pi_a - log_mu_a)
      # v_s for the value, q_s = r_s + gamma v_{s+1} for the policy (IMPALA's).
      value_target, policy_target, mask = losses.episode_aware_vtrace(
          raw_values, r, batch.discount[:-1], batch.first, rhos, cfg.discount,
          lambda_=p.gae_lambda)
    if cfg.reward_mode == 'h':  # targets and advantages live where the values do
      value_target, policy_target = rewards_lib.h(value_target), rewards_lib.h(policy_target)
    advantage = (policy_target - values[:-1]) * mask

    task = value_idx[:-1]
    new_stats = (popart.update_stats(stats, value_target, task, mask, cfg.popart_beta, axis_name)
                 if cfg.popart_enabled else stats)
    sigma_new = popart.sigma(new_stats)[task]
    old_norm_value = (popart.sigma(stats)[task] * n[:-1] + stats['mu'][task]
                      - new_stats['mu'][task]) / sigma_new
    t = Targets(advantage=advantage / sigma_new,
                norm_target=popart.normalize(new_stats, value_target, task),
                old_norm_value=old_norm_value, behaviour_log_prob=log_mu_a, mask=mask)
    t = jax.tree.map(jax.lax.stop_gradient, t)

    num_valid = jnp.sum(mask)
    sums = {'value_mean': jnp.sum(mask * values[:-1]),
            'advantage_mean': jnp.sum(mask * t.advantage),
            # KL(mu || pi) at the start of the update: the policy lag's share
            # of the ratios' distance from 1 (ppo/approx_kl adds the update's).
            'kl_behaviour': jnp.sum(mask * jnp.sum(jnp.exp(log_mu) * (log_mu - log_pi), axis=-1))}
    if axis_name is not None:
      num_valid, sums = jax.lax.psum((num_valid, sums), axis_name)
    metrics = {k: v / jnp.maximum(num_valid, 1.0) for k, v in sums.items()}
    metrics.update(health.metrics(unit_max, log_pi, mask, axis_name))
    return new_stats, t, metrics

  return targets


class Minibatch(NamedTuple):
  """What one PPO gradient step reads: the network's inputs (time-major
  [T', B', ...]; T' = 1 for a minibatch of single steps) and the Targets
  of the transitions at rows 0..T'-1 (time-major [T', B'])."""
  obs: dict
  first: jax.Array
  core_state: object
  action: jax.Array
  task_id: jax.Array
  targets: Targets


def loss_fn(apply_fn: Callable, cfg: losses.LossConfig, axis_name: Optional[str] = None):
  """Returns loss(params, stats, minibatch, entropy_cost=None) -> (loss, metrics).

  The reduction follows cfg.reduction: 'mean' over the minibatch's valid
  transitions (cleanrl's), or 'sum'. `entropy_cost` (a traced scalar: the
  optimiser state's) replaces cfg.entropy_cost when given.
  """
  p = cfg.ppo

  def loss(params, stats: popart.Stats, mb: Minibatch, entropy_cost=None):
    entropy_weight = cfg.entropy_cost if entropy_cost is None else entropy_cost
    out = apply_fn(params, stats, mb.obs, mb.first, mb.core_state)
    t = mb.targets
    rows = t.mask.shape[0]  # drop an unroll's bootstrap row, if any
    logits, norm_values = out[0][:rows], out[1][:rows]
    action = mb.action[:rows]
    value_idx = mb.task_id[:rows] if cfg.popart_enabled else jnp.zeros_like(mb.task_id[:rows])
    mask = t.mask

    num_valid = jnp.sum(mask)
    if axis_name is not None:
      num_valid = jax.lax.psum(num_valid, axis_name)
    num_valid = jnp.maximum(num_valid, 1.0)

    advantage = t.advantage
    if p.normalize_advantages:
      s1, s2 = jnp.sum(mask * advantage), jnp.sum(mask * advantage ** 2)
      if axis_name is not None:
        s1, s2 = jax.lax.psum((s1, s2), axis_name)
      mean = s1 / num_valid
      std = jnp.sqrt(jnp.maximum(s2 / num_valid - mean ** 2, 0.0))
      advantage = (advantage - mean) / (std + 1e-8)

    log_pi = jax.nn.log_softmax(logits)
    log_pi_a = jnp.take_along_axis(log_pi, action[..., None], axis=-1)[..., 0]
    log_ratio = log_pi_a - t.behaviour_log_prob
    ratio = jnp.exp(log_ratio)
    eps = p.clip_epsilon
    surrogate = jnp.minimum(ratio * advantage, jnp.clip(ratio, 1.0 - eps, 1.0 + eps) * advantage)
    pg_loss = -jnp.sum(mask * surrogate)

    n = jnp.take_along_axis(norm_values, value_idx[..., None], axis=-1)[..., 0]
    value_error = (n - t.norm_target) ** 2
    if p.value_clip_epsilon > 0:
      veps = p.value_clip_epsilon
      clipped = t.old_norm_value + jnp.clip(n - t.old_norm_value, -veps, veps)
      value_error = jnp.maximum(value_error, (clipped - t.norm_target) ** 2)
    baseline_loss = 0.5 * jnp.sum(mask * value_error)

    entropy = -jnp.sum(jnp.exp(log_pi) * log_pi, axis=-1)
    entropy_loss = -jnp.sum(mask * entropy)

    total = pg_loss + cfg.baseline_cost * baseline_loss + entropy_weight * entropy_loss
    reduced = total / num_valid if cfg.reduction == 'mean' else total
    ratio_sg = jax.lax.stop_gradient(ratio)
    metrics = {
        'loss/total': total, 'loss/policy': pg_loss, 'loss/baseline': baseline_loss,
        'loss/entropy': entropy_loss, 'entropy': jnp.sum(mask * entropy),
        # Share of transitions whose ratio left [1 - eps, 1 + eps].
        'ppo/clip_fraction': jnp.sum(mask * (jnp.abs(ratio_sg - 1.0) > eps)),
        # KL(mu || pi) estimate (Schulman's k3): mean of (r - 1) - log r.
        'ppo/approx_kl': jnp.sum(mask * ((ratio_sg - 1.0) - jax.lax.stop_gradient(log_ratio))),
        'ppo/ratio_mean': jnp.sum(mask * ratio_sg),
    }
    if axis_name is not None:
      metrics = jax.lax.psum(metrics, axis_name)
    metrics = {k: v / num_valid for k, v in metrics.items()}
    return reduced, metrics

  return loss
