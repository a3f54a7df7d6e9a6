"""The optimiser: a global-norm clip, then RMSProp or Adam, the learning rate
annealed linearly over the run's optimiser steps (after an optional warmup).

The hyperparameters population-based training adapts (base learning rate, clip, epsilon, entropy
cost) are float32 scalars in `opt_state.hyperparams` (`optax.inject_hyperparams`), so changing one
mid-run does not recompile the update and a checkpoint carries them.
"""

import dataclasses
from typing import Dict, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from infra.settings import (at_least, boolean, frozen_setting, integer, one_of, positive, setting,
                            within)

OPTIMIZERS = ('rmsprop', 'adam')
_MAX_HORIZON = 2**31 - 1   # the largest step count optax's int32 counter holds
CLIP_BY = ('global', 'term')

# opt_state.hyperparams' keys that can change mid-run ('eps': the named optimiser's).
HYPERPARAMETERS = ('learning_rate', 'entropy_cost', 'max_grad_norm', 'eps')


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  """The optimiser's settings (the config's `optimizer` group); the base
  learning rate and the entropy cost are top-level fields."""
  name: str = frozen_setting('rmsprop', "'rmsprop' (the rmsprop_* fields) or 'adam' (the adam_* fields)",
                      one_of(OPTIMIZERS))
  adam_b1: float = setting(0.9, "Adam's first-moment decay", within(0, 1, high_closed=False))
  adam_b2: float = setting(0.999, "Adam's second-moment decay", within(0, 1, high_closed=False))
  adam_eps: float = setting(1e-5, "Adam's epsilon, outside the square root (cleanrl's PPO: 1e-5)",
                            positive)
  rmsprop_decay: float = setting(0.99, 'RMSProp second-moment decay (public IMPALA ports)',
                                 within(0, 1, high_closed=False))
  rmsprop_eps: float = setting(0.01, "IMPALA's epsilon; it assumes losses summed over the batch",
                               positive)
  eps_in_sqrt: bool = setting(True, 'sqrt(nu + eps) as TF/IMPALA; False: sqrt(nu) + eps as '
                              'PyTorch/TorchBeast', boolean)
  rmsprop_initial_scale: float = setting(
      0.0, "where RMSProp's nu starts: 0 as optax/PyTorch, 1 as TF (recipe a2c)", at_least(0))
  momentum: float = frozen_setting(0.0, 'RMSProp momentum', at_least(0))
  warmup_updates: int = setting(
      0, 'learner updates over which the learning rate rises linearly, optimiser step by '
      "step, to its schedule's rate; 0: no warmup", integer(0))
  anneal_to: float = setting(
      0.0, 'the learning rate at the end of the run, as a fraction of its base: it falls '
      'linearly from the base to base x anneal_to; 0: to 0 (IMPALA, Cleanba), 1: constant',
      within(0, 1))
  max_grad_norm: float = setting(40.0, 'gradient-norm clip', positive)
  clip_by: str = frozen_setting(
      'global', "'global': the whole gradient's norm; 'term' (V-trace only): the policy's "
      "(policy gradient + entropy) and the value's gradients each clipped to max_grad_norm, "
      'then added', one_of(CLIP_BY))


def eps_field(optimizer_name: str) -> str:
  return 'optimizer.adam_eps' if optimizer_name == 'adam' else 'optimizer.rmsprop_eps'


def config_fields(optimizer_name: str) -> Dict[str, str]:
  """Config field -> its key in opt_state.hyperparams, for each of HYPERPARAMETERS."""
  return {'learning_rate': 'learning_rate', 'entropy_cost': 'entropy_cost',
          'optimizer.max_grad_norm': 'max_grad_norm', eps_field(optimizer_name): 'eps'}


def make_optimizer(learning_rate: float, total_learner_steps: int,
                   max_grad_norm: float, decay: float, eps: float,
                   momentum: float, eps_in_sqrt: bool = True, initial_scale: float = 0.0,
                   name: str = 'rmsprop', adam_b1: float = 0.9, adam_b2: float = 0.999,
                   adam_eps: float = 1e-5, entropy_cost: Optional[float] = None,
                   clip_in_chain: bool = True, warmup_steps: int = 0, anneal_to: float = 0.0):
  """A global-norm clip, then RMSProp or Adam, the learning rate annealed.

  The rate falls linearly from its base to `anneal_to` x base over `total_learner_steps` optimiser
  steps, counted by the optimiser's own step so a new base rate mid-run keeps the schedule's place;
  with `warmup_steps` W > 0, step n's rate is also multiplied by min(1, (n + 1) / W). RMSProp's
  `initial_scale` is where nu starts: 0 (optax) makes the first step ~10 lr sign(g) for every
  parameter, large enough to kill ReLU units; 1.0 is TensorFlow's.

  Args:
    total_learner_steps: optimiser steps of the anneal (at least 1 used).
    decay, eps, momentum, eps_in_sqrt, initial_scale: RMSProp's.
    entropy_cost: kept in the state with the other hyperparameters; None: not.
    clip_in_chain: False leaves the clip out of the chain; the learner then
      clips each term's gradient itself (rl/sgd.py, clip_by='term').

  Returns:
    (optimizer, schedule): an optax GradientTransformation, and
    `schedule(step, base=learning_rate)`, the rate at optimiser step `step`.

  Raises:
    ValueError: an unknown `name`, `warmup_steps` < 0 or `anneal_to` outside [0, 1].
  """
  if name not in OPTIMIZERS:
    raise ValueError(f'unknown optimizer {name!r}; choose one of {", ".join(OPTIMIZERS)}')
  if warmup_steps < 0:
    raise ValueError(f'warmup_steps must be >= 0, got {warmup_steps}')
  if not 0.0 <= anneal_to <= 1.0:
    raise ValueError(f'anneal_to must be in [0, 1], got {anneal_to}')
  # optax counts steps in int32; a longer horizon is the same as no decay.
  horizon = min(max(total_learner_steps, 1), _MAX_HORIZON)

  def schedule(step, base=learning_rate):
    # base (1 - (1 - anneal_to) min(1, step / horizon)), base traced.
    rate = base * optax.linear_schedule(1.0, anneal_to, horizon)(step)
    if warmup_steps:
      rate = rate * jnp.minimum(1.0, (jnp.asarray(step, jnp.float32) + 1.0) / warmup_steps)
    return rate

  def transform(learning_rate, max_grad_norm, eps):
    rate = lambda step: schedule(step, learning_rate)
    if name == 'adam':
      opt = optax.adam(rate, b1=adam_b1, b2=adam_b2, eps=eps)
    else:
      opt = optax.rmsprop(rate, decay=decay, eps=eps, eps_in_sqrt=eps_in_sqrt,
                          initial_scale=initial_scale,
                          momentum=momentum if momentum > 0 else None)
    if not clip_in_chain:
      return opt
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), opt)

  values = {'learning_rate': float(learning_rate), 'max_grad_norm': float(max_grad_norm),
            'eps': float(adam_eps if name == 'adam' else eps)}
  if entropy_cost is None:
    factory = transform
  else:
    def factory(learning_rate, max_grad_norm, eps, entropy_cost):
      del entropy_cost  # the loss's weight: kept here beside the others PBT changes
      return transform(learning_rate, max_grad_norm, eps)
    values['entropy_cost'] = float(entropy_cost)
  optimizer = optax.inject_hyperparams(factory, hyperparam_dtype=jnp.float32)(**values)
  return optimizer, schedule


def optimizer_from_settings(o: OptimizerConfig, learning_rate: float, entropy_cost: float,
                            total_learner_steps: int, steps_per_update: int):
  """The optimiser of a run's settings, annealed over all its optimiser steps
  (total_learner_steps x steps_per_update).

  Returns:
    (optimizer, schedule) as `make_optimizer`, the schedule indexed by
    learner update (`LearnerState.step`), for logging.
  """
  k = steps_per_update
  optimizer, schedule = make_optimizer(
      learning_rate, total_learner_steps * k, o.max_grad_norm, o.rmsprop_decay,
      o.rmsprop_eps, o.momentum, o.eps_in_sqrt, o.rmsprop_initial_scale, name=o.name,
      adam_b1=o.adam_b1, adam_b2=o.adam_b2, adam_eps=o.adam_eps, entropy_cost=entropy_cost,
      clip_in_chain=o.clip_by == 'global', warmup_steps=o.warmup_updates * k,
      anneal_to=o.anneal_to)
  if k == 1:
    return optimizer, schedule
  return optimizer, lambda step, base=learning_rate: schedule(step * k, base)


def hyperparameter(opt_state, key: str, default=None):
  """`opt_state.hyperparams[key]`, or `default` for a state without it (a bare optax chain)."""
  return getattr(opt_state, 'hyperparams', {}).get(key, default)


def hyperparameters(opt_state) -> Dict[str, jnp.ndarray]:
  return dict(opt_state.hyperparams)


def with_hyperparameters(opt_state, values: Dict[str, float]):
  """`opt_state` with some injected hyperparameters set; the next update uses them without compiling
  again. KeyError (naming the keys it holds) for a key the state does not hold."""
  current = opt_state.hyperparams
  for key in values:
    if key not in current:
      raise KeyError(f'{key!r} is not a hyperparameter of this optimiser state; it holds '
                     f'{", ".join(sorted(current))}')
  new = {k: (_like(np.asarray(values[k], v.dtype), v) if k in values else v)
         for k, v in current.items()}
  return opt_state._replace(hyperparams=new)


def _like(value: np.ndarray, old):
  """`value` placed as `old` is (replicated or uncommitted), so the jitted
  update sees the same input types and does not compile again."""
  if getattr(old, 'committed', False):
    return jax.device_put(value, old.sharding)
  return jnp.asarray(value)
