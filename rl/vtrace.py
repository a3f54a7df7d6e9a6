"""V-trace targets (Espeholt et al. 2018, arXiv 1802.01561) over unrolls that may cross episodes,
and the value targets, policy-gradient targets, advantages and per-task advantage moments the
learners take from them. Time-major: [T + 1, B] steps, T transitions."""

from typing import Callable, NamedTuple

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
  """V-trace targets v_s (Espeholt et al. 2018, eq. 1) and q_s = r_s + gamma_s v_{s+1}.

  rho_bar = c_bar = 1; `lambda_` < 1 gives c_s = lambda min(1, rho_s). Both
  outputs are stopped from gradients.

  Args:
    values: V(x_s) [T + 1, B]; the last row is the bootstrap.
    rewards, discounts, rhos: [T, B]; discounts 0 at a termination, rhos pi(a_s|x_s) / mu(a_s|x_s).

  Returns:
    (vs, qs), each [T, B].
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
  """`vtrace_returns` on actor_critic.episode_aware's transitions (same
  arguments, plus rhos and lambda_): (vs, qs, mask), each [T, B]."""
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

  Targets are in h-space for reward mode 'h'; for a categorical head without
  PopArt (actor_critic.symlog_values) the value targets are in symlog space
  and the advantages in reward units.
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
