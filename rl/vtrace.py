"""V-trace targets (Espeholt et al. 2018, arXiv 1802.01561) over unrolls
that may cross episodes, and what the learners take from them: value
targets, policy-gradient targets and advantages, and each task's advantage
moments over a batch. Time-major: [T + 1, B] rows, T transitions.
"""

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import rlax

from rl import actor_critic as ac
from rl import popart
from rl import rewards as rewards_lib
from rl import value_classification as vc
from rl.actor_critic import LossConfig
from rl.types import Unroll


def vtrace_returns(values, rewards, discounts, rhos, lambda_: float = 1.0):
  """V-trace targets v_s and q_s = r_s + gamma_s v_{s+1}, time-major.

  V-trace corrects multistep returns for the lag between the behaviour and
  the learner's policy with clipped importance weights; here
  rho_bar = c_bar = 1, and `lambda_` < 1 mixes in shorter returns
  (c_s = lambda min(1, rho_s)). rlax works on one trajectory, so it is
  vmapped over the batch axis. Both outputs are stopped from gradients.

  See "IMPALA: Scalable Distributed Deep-RL with Importance Weighted
  Actor-Learner Architectures" by Espeholt et al. 2018
  (https://arxiv.org/abs/1802.01561).

  Args:
    values: V(x_s) [T + 1, B]; the last row is the bootstrap.
    rewards: r_s [T, B].
    discounts: gamma_s [T, B] (the discount, 0 at a termination).
    rhos: importance weights pi(a_s|x_s) / mu(a_s|x_s) [T, B].
    lambda_: the trace's lambda.

  Returns:
    (vs, qs), each [T, B]: the value targets v_s and the policy-gradient
    targets q_s.
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

  `vtrace_returns` on the transitions of actor_critic.episode_aware: a reset
  step is masked and its target is its own value. The values are stopped from
  gradients.

  Args:
    raw_values: values in reward units [T + 1, B].
    rewards: rewards [T, B].
    discounts: 1 - terminated, [T, B].
    first: bool [T + 1, B], x_t starts an episode.
    rhos: importance weights [T, B].
    gamma: the discount factor.
    lambda_: the trace's lambda.

  Returns:
    (vs, qs, mask), each [T, B]; mask is 1 for real transitions and 0 for
    reset steps.
  """
  rewards, discounts, mask = ac.episode_aware(raw_values, rewards, discounts, first, gamma)
  vs, qs = vtrace_returns(jax.lax.stop_gradient(raw_values), rewards, discounts, rhos, lambda_)
  return vs, qs, mask


class Targets(NamedTuple):
  """One forward pass over an unroll and its V-trace targets."""
  evaluation: ac.Evaluation
  rhos: jax.Array        # [T, B] pi(a_s|x_s) / mu(a_s|x_s)
  vs: jax.Array          # [T, B] value targets (h-space for reward mode 'h')
  qs: jax.Array          # [T, B] policy-gradient targets
  mask: jax.Array        # [T, B] 1 for real transitions
  advantage: jax.Array   # [T, B] min(rho_s, 1) (q_s - V(x_s)), before PopArt's scaling;
                         # stopped from gradients
  raw_vs: jax.Array      # [T, B] the value targets in reward units


def targets(apply_fn: Callable, cfg: LossConfig, params, stats: popart.Stats,
             batch: Unroll) -> Targets:
  """The network over `batch`, its V-trace targets and advantages.

  Args:
    apply_fn: the network, as for rl/impala.loss_fn.
    cfg: the loss settings.
    params: the network's parameters.
    stats: the PopArt statistics (and a categorical head's return range).
    batch: the unroll, time-major [T + 1, B, ...].

  Returns:
    Targets: with reward mode 'h' the targets in h-space; for a categorical
    head without PopArt (actor_critic.symlog_values) the value targets in
    symlog space and the advantages in reward units.
  """
  e = ac.evaluate_unroll(apply_fn, cfg, params, stats, batch)
  rhos = jnp.exp(jax.lax.stop_gradient(e.log_pi_a) - e.log_mu_a)
  vs, qs, mask = episode_aware_vtrace(e.raw_values, e.rewards, batch.discount[:-1],
                                      batch.first, rhos, cfg.discount)
  raw_vs = vs
  if cfg.reward_mode == 'h':
    vs, qs = rewards_lib.h(vs), rewards_lib.h(qs)
  if ac.symlog_values(cfg):   # value targets in symlog space, advantages in reward units
    advantage = jnp.minimum(rhos, 1.0) * (qs - e.raw_values[:-1])
    vs = vc.symlog(vs)
  else:
    advantage = jnp.minimum(rhos, 1.0) * (qs - e.values[:-1])
  return Targets(e, rhos, vs, qs, mask, jax.lax.stop_gradient(advantage), raw_vs)


def advantage_moments_fn(apply_fn: Callable, cfg: LossConfig,
                         axis_name: Optional[str] = None) -> Callable:
  """Each task's advantage mean and std over a whole batch, for
  `normalize_advantages_per='task_batch'`.

  Args:
    apply_fn: the network, as for `loss_fn`.
    cfg: the loss settings.
    axis_name: the devices the batch spans; None for one device.

  Returns:
    moments(params, stats, batch) -> ac.TaskMoments [num_tasks]: the moments
    of min(rho_s, 1) (q_s - V(x_s)) over each task's valid steps of the
    global batch (one forward pass, no gradient), in reward units (h-space
    for reward mode 'h'), before PopArt's per-task scaling, which a per-task
    normalisation cancels.
  """
  def moments(params, stats: popart.Stats, batch: Unroll) -> ac.TaskMoments:
    t = targets(apply_fn, cfg, params, stats, batch)
    return ac.task_moments(t.advantage, t.mask, batch.task_id[:-1], cfg.num_tasks, axis_name)
  return moments
