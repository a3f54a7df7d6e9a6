"""What one learner update does, term by term: the numbers behind "why does this run not learn?".
Pure functions of a learner state and a batch (one device), for a learner whose loss splits by term
(rl/actor_critic.Learner.term_loss: IMPALA's, Espeholt et al. 2018, arXiv 1802.01561)."""

from typing import Callable, Dict

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rl.actor_critic import LossConfig
from rl.types import Unroll
from networks.agent import VALUE_HEAD

TERMS = ('policy', 'baseline', 'entropy')


def term_gradients(term_loss: Callable, apply_fn: Callable, cfg: LossConfig, params, stats,
                   batch: Unroll) -> Dict[str, object]:
  """The gradient of a learner's loss (Learner.term_loss) split into its terms.

  The loss is linear in the term weights: g_policy = grad at (baseline_cost, entropy_cost) = (0, 0),
  g_entropy = grad at (0, c_e) - g_policy, g_baseline = the full gradient - grad at (0, c_e).

  Returns:
    {'policy', 'baseline', 'entropy', 'total'} -> gradient pytrees shaped as
    `params`; the first three add up to 'total'.
  """
  def grad_at(baseline_cost, entropy_cost):
    loss_fn = term_loss(
        apply_fn, cfg._replace(baseline_cost=baseline_cost, entropy_cost=entropy_cost))
    return jax.grad(lambda p: loss_fn(p, stats, batch)[0])(params)

  g_policy = grad_at(0.0, 0.0)
  g_policy_entropy = grad_at(0.0, cfg.entropy_cost)
  g_total = grad_at(cfg.baseline_cost, cfg.entropy_cost)
  sub = lambda a, b: jax.tree.map(jnp.subtract, a, b)
  return {'policy': g_policy, 'entropy': sub(g_policy_entropy, g_policy),
          'baseline': sub(g_total, g_policy_entropy), 'total': g_total}


def gradient_report(grads: Dict[str, object], max_grad_norm: float) -> Dict[str, jax.Array]:
  """Scalars 'grad/<term>' (global norm), 'grad/<term>/<module>' (per top-level module) and
  'clip_scale', the factor clip_by_global_norm multiplies the gradient by (1 = not binding)."""
  out = {}
  for term, g in grads.items():
    out[f'grad/{term}'] = optax.tree.norm(g)
    for module, sub in g.items():
      out[f'grad/{term}/{module}'] = optax.tree.norm(sub)
  out['clip_scale'] = jnp.minimum(1.0, max_grad_norm / jnp.maximum(out['grad/total'], 1e-12))
  return out


def rmsprop_nu(opt_state):
  """The `nu` of the one ScaleByRmsState in an optax state (ValueError for none or several)."""
  return _one_state(opt_state, 'ScaleByRmsState').nu


def _one_state(opt_state, type_name: str):
  found = [s for s in jax.tree.leaves(opt_state, is_leaf=lambda s: type(s).__name__ == type_name)
           if type(s).__name__ == type_name]
  if len(found) != 1:
    raise ValueError(f'expected one {type_name} in the optimiser state, found {len(found)}')
  return found[0]


def denominator_floor(opt_state, eps: float, eps_in_sqrt: bool, optimizer: str = 'rmsprop',
                      adam_b2: float = 0.999):
  """The optimiser's per-parameter denominator term (flat) and the value below which eps dominates.

  Returns:
    (term, floor): RMSProp's nu against eps (`eps_in_sqrt`: sqrt(nu + eps)) or sqrt(nu) against eps
    (outside the root); Adam's bias-corrected sqrt(nu_hat) against eps (optax's form).

  Raises:
    ValueError: when the state does not hold exactly one such optimiser state.
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
  """sum(mask KL(softmax(p) || softmax(q))) / max(sum(mask), 1); logits [..., A], mask [...]."""
  return jnp.sum(mask * _step_kl(logits_p, logits_q)) / jnp.maximum(jnp.sum(mask), 1.0)


def step_report(apply_fn: Callable, before, after, batch: Unroll, learning_rate: float,
                eps: float, eps_in_sqrt: bool = True, optimizer: str = 'rmsprop',
                adam_b2: float = 0.999) -> Dict[str, jax.Array]:
  """The update from LearnerState `before` to `after` on `batch`.

  Returns:
    'step/median', 'step/p99', 'step/max': |delta theta| over all parameters; 'step/mean_over_lr':
    mean |delta| / lr (about 1 for sign-like RMSProp steps, far below when epsilon dominates);
    'eps_dominated': the share of parameters below denominator_floor after the update; 'kl_update',
    'kl_update_max': KL(pi_before || pi_after) over the valid steps (reset steps masked).
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
  """'rho/mean', 'rho/min', 'rho/max', 'rho/clipped' (floats) over the valid steps of the loss's
  extras ('mask', 'rhos' [T, B]) and 'valid_steps' (int); clipped: rho > 1 + 1e-3 (not noise)."""
  mask = np.asarray(extras['mask']) > 0
  rhos = np.asarray(extras['rhos'])[mask]
  return {'rho/mean': float(rhos.mean()), 'rho/min': float(rhos.min()),
          'rho/max': float(rhos.max()), 'rho/clipped': float((rhos > 1.0 + 1e-3).mean()),
          'valid_steps': int(mask.sum())}
