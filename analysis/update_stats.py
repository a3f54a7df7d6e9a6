"""What one learner update does, term by term: the numbers behind "why does
this run not learn?".

Pure functions of a learner state and a batch (one device):

* `term_gradients`: the gradient of the IMPALA loss (Espeholt et al. 2018,
  arXiv 1802.01561) split into its policy,
  baseline and entropy terms. The loss is linear in the term weights, so
  g_policy = grad at (baseline_cost, entropy_cost) = (0, 0), g_entropy =
  grad at (0, c_e) minus g_policy, g_baseline = the full gradient minus
  grad at (0, c_e).
* `gradient_report`: global and per-module norms of each term, and the
  factor the global-norm clip scales the whole gradient by.
* `step_report`: given the state before and after one real update, the
  parameter step (|delta| per parameter, and over the learning rate), the
  share of parameters whose RMSProp denominator is dominated by epsilon,
  and the KL(pi_before || pi_after) on the batch's valid steps.
"""

from typing import Callable, Dict

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rl import impala
from rl.actor_critic import LossConfig
from rl.types import Unroll
from networks.agent import VALUE_HEAD

TERMS = ('policy', 'baseline', 'entropy')


def term_gradients(apply_fn: Callable, cfg: LossConfig, params, stats,
                   batch: Unroll) -> Dict[str, object]:
  """The gradient of the IMPALA loss split into its terms (the module docstring).

  Args:
    apply_fn: the network's apply function (networks.agent.apply_fn).
    cfg: the loss settings; its baseline_cost and entropy_cost weight the
      terms.
    params: the network's parameters.
    stats: the value head's PopArt statistics.
    batch: one device's Unroll.

  Returns:
    {'policy', 'baseline', 'entropy', 'total'} -> a gradient pytree shaped
    as `params`; the first three add up to 'total'.
  """
  def grad_at(baseline_cost, entropy_cost):
    loss_fn = impala.loss_fn(
        apply_fn, cfg._replace(baseline_cost=baseline_cost, entropy_cost=entropy_cost))
    return jax.grad(lambda p: loss_fn(p, stats, batch)[0])(params)

  g_policy = grad_at(0.0, 0.0)
  g_policy_entropy = grad_at(0.0, cfg.entropy_cost)
  g_total = grad_at(cfg.baseline_cost, cfg.entropy_cost)
  sub = lambda a, b: jax.tree.map(jnp.subtract, a, b)
  return {'policy': g_policy, 'entropy': sub(g_policy_entropy, g_policy),
          'baseline': sub(g_total, g_policy_entropy), 'total': g_total}


def gradient_report(grads: Dict[str, object], max_grad_norm: float) -> Dict[str, jax.Array]:
  """Gradient norms per term and module, and the global-norm clip's scale.

  Args:
    grads: `term_gradients`' output (needs 'total').
    max_grad_norm: the clip's global norm.

  Returns:
    Scalars: 'grad/<term>' (global norm), 'grad/<term>/<module>' (per
    top-level module: torso, core, policy_head, value_head) and
    'clip_scale', the factor clip_by_global_norm multiplies the total
    gradient by (1 = not binding).
  """
  out = {}
  for term, g in grads.items():
    out[f'grad/{term}'] = optax.tree.norm(g)
    for module, sub in g.items():
      out[f'grad/{term}/{module}'] = optax.tree.norm(sub)
  out['clip_scale'] = jnp.minimum(1.0, max_grad_norm / jnp.maximum(out['grad/total'], 1e-12))
  return out


def rmsprop_nu(opt_state):
  """The RMSProp second-moment tree inside the learner's optimiser state.

  Args:
    opt_state: the optax state.

  Returns:
    The `nu` of its one ScaleByRmsState.

  Raises:
    ValueError: when the state holds none or several.
  """
  return _one_state(opt_state, 'ScaleByRmsState').nu


def _one_state(opt_state, type_name: str):
  found = [s for s in jax.tree.leaves(opt_state, is_leaf=lambda s: type(s).__name__ == type_name)
           if type(s).__name__ == type_name]
  if len(found) != 1:
    raise ValueError(f'expected one {type_name} in the optimiser state, found {len(found)}')
  return found[0]


def denominator_floor(opt_state, eps: float, eps_in_sqrt: bool, optimizer: str = 'rmsprop',
                      adam_b2: float = 0.999):
  """The optimiser's per-parameter denominator term and the value below which eps dominates it.

  Args:
    opt_state: the optax state.
    eps: the optimiser's epsilon.
    eps_in_sqrt: RMSProp's epsilon inside the root (sqrt(nu + eps)).
    optimizer: 'rmsprop' or 'adam'.
    adam_b2: Adam's second-moment decay, for its bias correction.

  Returns:
    (term, floor), the term flattened over all parameters: RMSProp's nu
    against eps (inside the root) or sqrt(nu) against eps (outside); Adam's
    bias-corrected sqrt(nu_hat) against eps (optax's form).

  Raises:
    ValueError: when the state does not hold exactly one such optimiser
      state.
  """
  if optimizer == 'adam':
    state = _one_state(opt_state, 'ScaleByAdamState')
    correction = 1.0 - adam_b2 ** state.count.astype(jnp.float32)
    nu = jnp.concatenate([n.ravel() for n in jax.tree.leaves(state.nu)])
    return jnp.sqrt(nu / jnp.maximum(correction, 1e-12)), eps
  nu = jnp.concatenate([n.ravel() for n in jax.tree.leaves(rmsprop_nu(opt_state))])
  return (nu if eps_in_sqrt else jnp.sqrt(nu)), eps


def _step_kl(logits_p: jax.Array, logits_q: jax.Array) -> jax.Array:
  """KL(softmax(p) || softmax(q)) per step: logits [..., A] -> [...]."""
  log_p = jax.nn.log_softmax(logits_p)
  return jnp.sum(jnp.exp(log_p) * (log_p - jax.nn.log_softmax(logits_q)), axis=-1)


def policy_kl(logits_p: jax.Array, logits_q: jax.Array, mask: jax.Array) -> jax.Array:
  """The mean over a mask of KL(softmax(p) || softmax(q)).

  Args:
    logits_p: [..., A].
    logits_q: [..., A].
    mask: [...], 1 for the steps counted.

  Returns:
    A scalar: sum(mask * KL) / max(sum(mask), 1).
  """
  return jnp.sum(mask * _step_kl(logits_p, logits_q)) / jnp.maximum(jnp.sum(mask), 1.0)


def step_report(apply_fn: Callable, before, after, batch: Unroll, learning_rate: float,
                eps: float, eps_in_sqrt: bool = True, optimizer: str = 'rmsprop',
                adam_b2: float = 0.999) -> Dict[str, jax.Array]:
  """The update from LearnerState `before` to `after` on `batch`.

  'step/median', 'step/p99', 'step/max': |delta theta| over all parameters;
  'step/mean_over_lr': mean |delta| / lr (about 1 for sign-like RMSProp
  steps, far below 1 when epsilon dominates); 'eps_dominated': share of
  parameters whose RMSProp denominator is set by eps rather than the
  gradient: nu < eps for sqrt(nu + eps) (`eps_in_sqrt`), sqrt(nu) < eps for
  sqrt(nu) + eps, nu read after the update (Adam: sqrt(nu_hat) < eps);
  'kl_update' and
  'kl_update_max': KL(pi_before || pi_after) over the batch's valid steps
  (the reset steps are masked, as in the loss).

  Args:
    apply_fn: the network's apply function.
    before: the LearnerState before the update.
    after: the LearnerState after it.
    batch: the Unroll the update used.
    learning_rate: the update's learning rate.
    eps: the optimiser's epsilon.
    eps_in_sqrt: RMSProp's epsilon inside the root.
    optimizer: 'rmsprop' or 'adam'.
    adam_b2: Adam's second-moment decay.

  Returns:
    The scalars named above.
  """
  delta = jnp.concatenate([jnp.abs(a - b).ravel() for a, b in zip(
      jax.tree.leaves(after.params), jax.tree.leaves(before.params))])
  moment, floor = denominator_floor(after.opt_state, eps, eps_in_sqrt, optimizer, adam_b2)
  logits_before = apply_fn(before.params, _stats(before), batch.obs, batch.first,
                           batch.core_state)[0][:-1]
  logits_after = apply_fn(after.params, _stats(after), batch.obs, batch.first,
                          batch.core_state)[0][:-1]
  mask = 1.0 - batch.first[1:].astype(jnp.float32)
  kl = _step_kl(logits_before, logits_after)
  return {
      'step/median': jnp.median(delta),
      'step/p99': jnp.percentile(delta, 99.0),
      'step/max': jnp.max(delta),
      'step/mean_over_lr': jnp.mean(delta) / learning_rate,
      'eps_dominated': jnp.mean((moment < floor).astype(jnp.float32)),
      'kl_update': jnp.sum(mask * kl) / jnp.maximum(jnp.sum(mask), 1.0),
      'kl_update_max': jnp.max(jnp.where(mask > 0, kl, 0.0)),
  }


def _stats(state):
  return state.popart[VALUE_HEAD]


def batch_report(batch: Unroll, extras: Dict[str, jax.Array]) -> Dict[str, float]:
  """Off-policy statistics of a batch from the loss's extras (host numpy).

  'rho/clipped' is the share of valid steps whose rho exceeds 1 by more than
  float noise (1e-3), so that V-trace's clip at 1 changes them.

  Args:
    batch: the Unroll (unused).
    extras: the loss's extras with 'mask' and 'rhos' [T, B].

  Returns:
    'rho/mean', 'rho/min', 'rho/max', 'rho/clipped' over the valid steps
    (floats) and 'valid_steps' (an int).
  """
  mask = np.asarray(extras['mask']) > 0
  rhos = np.asarray(extras['rhos'])[mask]
  return {'rho/mean': float(rhos.mean()), 'rho/min': float(rhos.min()),
          'rho/max': float(rhos.max()), 'rho/clipped': float((rhos > 1.0 + 1e-3).mean()),
          'valid_steps': int(mask.sum())}
