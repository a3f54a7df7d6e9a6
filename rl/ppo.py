"""PPO (Schulman et al. 2017, arXiv 1707.06347) with per-task PopArt, on the
actors' unrolls and the same evaluation as IMPALA (rl/actor_critic.py).

Per batch, one forward pass gives GAE(lambda) or V-trace(lambda) targets; PopArt steps on them and
the value head is rescaled once (`targets_fn`). Then epochs x minibatches steps of the clipped
surrogate (`loss_fn`). Written for one device's shard; global sums cross `axis_name`.
"""

import dataclasses
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from infra.settings import at_least, boolean, integer, one_of, positive, setting, within
from rl import actor_critic as ac
from rl import health
from rl import popart
from rl import rewards as rewards_lib
from rl import sgd
from rl import vtrace
from rl.actor_critic import LossConfig, LossOutput
from rl.types import Unroll

NAME = 'ppo'
CONFIG_GROUP = 'ppo'   # the run config's group of PPOConfig's fields
VALUE_TARGETS = ('gae', 'vtrace')
SPLITS = ('steps', 'unrolls')


@dataclasses.dataclass(frozen=True)
class PPOConfig:
  """PPO's settings (the config's `ppo` group; read only when loss.name =
  'ppo'). The defaults are cleanrl's Atari PPO."""
  epochs: int = setting(4, 'passes over each batch', integer(1))
  minibatches: int = setting(4, 'gradient steps per pass (the batch split in this many parts)',
                             integer(1))
  clip_epsilon: float = setting(0.1, "the surrogate's ratio clip: [1 - eps, 1 + eps]", positive)
  value_clip_epsilon: float = setting(
      0.1, "clip the value's move from its start-of-update value (normalised units); 0 = off",
      at_least(0, ' (0 = no clip)'))
  gae_lambda: float = setting(
      0.95, "GAE's lambda; also V-trace's lambda with value_targets='vtrace'", within(0, 1))
  value_targets: str = setting(
      'gae', "'gae' (on-policy GAE, as PPO) or 'vtrace' (off-policy corrected with lambda)",
      one_of(VALUE_TARGETS))
  normalize_advantages: bool = setting(
      True, "per-minibatch advantage mean 0, std 1 (cleanrl), after PopArt's per-task scaling",
      boolean)
  split: str = setting(
      'steps', "minibatches of shuffled single steps ('steps'; feed-forward nets) or whole "
      "unrolls ('unrolls')", one_of(SPLITS))


def settings(cfg: LossConfig) -> PPOConfig:
  """`cfg.settings`: PPOConfig's defaults for None; TypeError for any other type."""
  if cfg.settings is None:
    return PPOConfig()
  if not isinstance(cfg.settings, PPOConfig):
    raise TypeError(f'the PPO loss reads a PPOConfig, not {type(cfg.settings).__name__}')
  return cfg.settings


def batch_split(p: PPOConfig, per_device_batch: int, unroll_length: int):
  """('minibatches', why) when `p.minibatches` does not divide one learner
  device's unrolls (split 'unrolls') or steps (split 'steps'); else None."""
  m = p.minibatches
  if p.split == 'unrolls' and per_device_batch % m:
    return ('minibatches', f'{m} minibatches of whole unrolls do not split the '
            f'{per_device_batch} unrolls of each learner device; use a divisor of '
            f'{per_device_batch}')
  steps = per_device_batch * unroll_length
  if p.split == 'steps' and steps % m:
    return ('minibatches', f'{m} minibatches do not split the {steps} steps of each learner '
            f'device; use a divisor of {steps}')
  return None


class Targets(NamedTuple):
  """Per transition [T, B]: what every minibatch of one update shares."""
  advantage: jax.Array         # per-task normalised: A / sigma_i
  norm_target: jax.Array       # value target, normalised with the new statistics
  old_norm_value: jax.Array    # the rescaled head's value at the start of the update
  behaviour_log_prob: jax.Array  # log mu(a_t | x_t)
  mask: jax.Array              # 1 for real transitions, 0 for reset steps


def gae(values, rewards, discounts, lambda_):
  """Generalised advantage estimates (Schulman et al. 2016, arXiv 1506.02438).

  delta_t = r_t + d_t V_{t+1} - V_t, A_t = delta_t + d_t lambda A_{t+1}.

  Args:
    values: [T + 1, B]; the last row is the bootstrap.
    rewards: [T, B].
    discounts: [T, B]: gamma, or 0 at a termination.

  Returns:
    A [T, B].
  """
  deltas = rewards + discounts * values[1:] - values[:-1]

  def step(next_advantage, x):
    delta, discount = x
    advantage = delta + discount * lambda_ * next_advantage
    return advantage, advantage

  _, advantages = jax.lax.scan(step, jnp.zeros_like(values[0]), (deltas, discounts),
                               reverse=True)
  return advantages


def targets_fn(apply_fn: Callable, cfg: LossConfig, axis_name: Optional[str] = None):
  """What every minibatch of one PPO update shares, from one forward pass.

  Advantages and value targets are GAE(lambda) or V-trace(lambda) (`value_targets`, lambda =
  gae_lambda) over episode-aware transitions, in reward units (h-space for reward mode 'h'). With
  PopArt the statistics step on the value targets; targets and start-of-update values are then in
  the new normalised units and advantages divided by sigma_i. All stopped.

  Args:
    apply_fn: as rl/actor_critic.evaluate_unroll's.

  Returns:
    targets(params, stats, batch) -> (new_stats, Targets [T, B], metrics).
    The caller rescales the value head for `new_stats` before the epochs.
  """
  p = settings(cfg)

  def targets(params, stats: popart.Stats, batch: Unroll):
    e = ac.evaluate_unroll(apply_fn, cfg, params, stats, batch)
    if p.value_targets == 'gae':
      rewards, discounts, mask = ac.episode_aware(e.raw_values, e.rewards, batch.discount[:-1],
                                                  batch.first, cfg.discount)
      value_target = gae(e.raw_values, rewards, discounts, p.gae_lambda) + e.raw_values[:-1]
      policy_target = value_target              # A = G^lambda - V
    else:
      rhos = jnp.exp(e.log_pi_a - e.log_mu_a)
      # v_s for the value, q_s = r_s + gamma v_{s+1} for the policy (IMPALA's).
      value_target, policy_target, mask = vtrace.episode_aware_vtrace(
          e.raw_values, e.rewards, batch.discount[:-1], batch.first, rhos, cfg.discount,
          lambda_=p.gae_lambda)
    if cfg.reward_mode == 'h':  # targets and advantages live where the values do
      value_target, policy_target = rewards_lib.h(value_target), rewards_lib.h(policy_target)
    advantage = (policy_target - e.values[:-1]) * mask

    task = e.value_idx[:-1]
    new_stats, stats_step = (
        popart.update_stats_and_step(stats, value_target, task, mask, cfg.popart_beta,
                                     axis_name, cfg.popart_per_sample)
        if cfg.popart_enabled else (stats, None))
    t = Targets(advantage=popart.scale(new_stats, advantage, task),
                norm_target=popart.normalize(new_stats, value_target, task),
                old_norm_value=popart.rescaled_value(stats, new_stats, e.n[:-1], task),
                behaviour_log_prob=e.log_mu_a, mask=mask)
    t = jax.tree.map(jax.lax.stop_gradient, t)

    log_mu, log_pi = e.log_mu, jax.lax.stop_gradient(e.log_pi)
    sums = {'value_mean': jnp.sum(mask * e.values[:-1]),
            'advantage_mean': jnp.sum(mask * t.advantage),
            # KL(mu || pi) at the start of the update: the policy lag.
            'kl_behaviour': jnp.sum(mask * jnp.sum(jnp.exp(log_mu) * (log_mu - log_pi), axis=-1))}
    count = ac.num_valid(mask, axis_name)
    metrics = {k: v / count for k, v in ac.global_sum(sums, axis_name).items()}
    metrics.update(health.metrics(e.unit_max, log_pi, mask, axis_name))
    if cfg.popart_enabled:
      metrics[popart.STEP_METRIC] = stats_step
    return new_stats, t, metrics

  return targets


class Minibatch(NamedTuple):
  """What one PPO step reads: network inputs [T', B', ...] (T' = 1 for single
  steps) and the Targets of rows 0..T'-1 [T', B']."""
  obs: dict
  first: jax.Array
  core_state: object
  action: jax.Array
  task_id: jax.Array
  targets: Targets


def loss_fn(apply_fn: Callable, cfg: LossConfig, axis_name: Optional[str] = None):
  """The PPO loss of one minibatch (Schulman et al. 2017, eq. 7 and 9).

  -min(r A, clip(r, 1 - eps, 1 + eps) A), r = pi(a|x) / mu(a|x) against the
  behaviour policy, A optionally normalised over the global minibatch; value
  loss 0.5 (n - target)^2 on normalised targets, with value_clip_epsilon > 0
  the larger of that and the clipped value's loss; minus the entropy bonus.

  Returns:
    loss(params, stats, minibatch, entropy_cost=None) -> (loss, metrics).
    `entropy_cost` (traced, the optimiser state's) replaces cfg.entropy_cost.
  """
  p = settings(cfg)

  def loss(params, stats: popart.Stats, mb: Minibatch, entropy_cost=None):
    entropy_weight = cfg.entropy_cost if entropy_cost is None else entropy_cost
    out = apply_fn(params, stats, mb.obs, mb.first, mb.core_state)
    t = mb.targets
    rows = t.mask.shape[0]  # drop an unroll's bootstrap row, if any
    logits, norm_values = out[0][:rows], out[1][:rows]
    action = mb.action[:rows]
    value_idx = ac.value_index(cfg, mb.task_id[:rows])
    mask = t.mask

    num_valid = ac.num_valid(mask, axis_name)
    advantage = t.advantage
    if p.normalize_advantages:
      advantage = ac.normalize(advantage, mask, axis_name)

    log_pi = jax.nn.log_softmax(logits)
    log_pi_a = ac.take(log_pi, action)
    log_ratio = log_pi_a - t.behaviour_log_prob
    ratio = jnp.exp(log_ratio)
    eps = p.clip_epsilon
    surrogate = jnp.minimum(ratio * advantage, jnp.clip(ratio, 1.0 - eps, 1.0 + eps) * advantage)
    pg_loss = -jnp.sum(mask * surrogate)

    n = ac.take(norm_values, value_idx)
    value_error = (n - t.norm_target) ** 2
    if p.value_clip_epsilon > 0:
      veps = p.value_clip_epsilon
      clipped = t.old_norm_value + jnp.clip(n - t.old_norm_value, -veps, veps)
      value_error = jnp.maximum(value_error, (clipped - t.norm_target) ** 2)
    baseline_loss = 0.5 * jnp.sum(mask * value_error)

    entropy = ac.entropy(log_pi)
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
    metrics = {k: v / num_valid for k, v in ac.global_sum(metrics, axis_name).items()}
    return reduced, metrics

  return loss


def split_minibatches(batch: Unroll, targets: Targets, num: int, split: str, key) -> Minibatch:
  """One epoch's minibatches of a device's shard, on a leading axis of `num`.

  'steps': the T x B transitions shuffled into parts of [1, T B / num] (feed-forward networks;
  `first` True everywhere). 'unrolls': the B unrolls shuffled into parts of [T + 1, B / num] with
  their core states. Leftovers are dropped. ValueError for a `split` not in SPLITS.
  """
  t, b = targets.mask.shape
  if split == 'steps':
    n = t * b
    size = n // num
    idx = jax.random.permutation(key, n)[:num * size].reshape(num, size)
    flat = lambda x: x[:t].reshape((n,) + x.shape[2:])
    take = lambda x: flat(x)[idx][:, None]   # [num, 1, size, ...]
    return Minibatch(
        obs=jax.tree.map(take, batch.obs), first=jnp.ones((num, 1, size), bool),
        core_state=batch.core_state, action=take(batch.action), task_id=take(batch.task_id),
        targets=jax.tree.map(take, targets))
  if split == 'unrolls':
    size = b // num
    idx = jax.random.permutation(key, b)[:num * size].reshape(num, size)
    take = lambda x: jnp.moveaxis(x[:, idx], 1, 0)   # [T(+1), B, ...] -> [num, T(+1), size, ...]
    return Minibatch(
        obs=jax.tree.map(take, batch.obs), first=take(batch.first),
        core_state=jax.tree.map(lambda x: x[idx], batch.core_state),
        action=take(batch.action), task_id=take(batch.task_id),
        targets=jax.tree.map(take, targets))
  raise ValueError(f'unknown ppo.split {split!r}; choose one of {", ".join(SPLITS)}')


def make_update(apply_fn: Callable, cfg: LossConfig, optimizer: optax.GradientTransformation,
                value_head: str, axis_name: Optional[str], seed: int = 0,
                max_grad_norm: float = float('inf')) -> Callable:
  """The PPO learner's update of one device's shard (the module docstring's
  steps), a fresh shuffle each epoch.

  Args:
    value_head: the top-level param name of the head PopArt rescales.
    seed: with the step, seeds the shuffles (same on every device).
    max_grad_norm: the clip for an optimiser state without one.

  Returns:
    The update of rl/actor_critic.Learner.make_update; metrics are
    `targets_fn`'s and the means over the steps of `loss_fn`'s.
  """
  p = settings(cfg)
  targets = targets_fn(apply_fn, cfg, axis_name)
  ppo_loss = loss_fn(apply_fn, cfg, axis_name)

  def with_stats(params, stats, minibatch, entropy_cost):
    loss, metrics = ppo_loss(params, stats, minibatch, entropy_cost)
    return loss, LossOutput(loss, stats, metrics, {})

  sgd_step = sgd.make_sgd_step(with_stats, optimizer, value_head, axis_name, max_grad_norm)

  def update(params, opt_state, stats, batch: Unroll, step, state=()):
    new_stats, t, metrics = targets(params, stats, batch)
    if cfg.popart_enabled:  # once per batch; the epochs see the rescaled head
      params = popart.rescale_head(params, value_head, stats, new_stats)
    key = jax.random.fold_in(jax.random.key(seed), step)

    def minibatch_step(carry, minibatch):
      params, opt_state = carry
      params, opt_state, out = sgd_step(params, opt_state, new_stats, minibatch)
      return (params, opt_state), out.metrics

    def epoch(carry, epoch_key):
      minibatches = split_minibatches(batch, t, p.minibatches, p.split, epoch_key)
      return jax.lax.scan(minibatch_step, carry, minibatches)

    (params, opt_state), step_metrics = jax.lax.scan(
        epoch, (params, opt_state), jax.random.split(key, p.epochs))
    metrics.update(jax.tree.map(jnp.mean, step_metrics))
    return params, opt_state, new_stats, metrics, state

  return update


LEARNER = ac.Learner(
    name=NAME, config_group=CONFIG_GROUP, settings_type=PPOConfig, make_update=make_update,
    optimizer_steps=lambda p: p.epochs * p.minibatches, batch_split=batch_split,
    network_check=lambda p, recurrent: (
        ('split', "'steps' shuffles single steps, which a recurrent network cannot take (its "
         "state runs along the unroll); use 'unrolls'") if p.split == 'steps' and recurrent
        else None))
