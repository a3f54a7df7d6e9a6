"""The optimiser: a global-norm clip, then RMSProp or Adam, the learning rate
annealed linearly to 0 (or to a fraction of its base, `anneal_to`) over the
run's optimiser steps (after an optional linear warmup).

The hyperparameters population-based training adapts live in the optimiser
state, through `optax.inject_hyperparams`: `opt_state.hyperparams` holds the
base learning rate, the clip threshold, the optimiser's epsilon and (when
given) the loss's entropy cost as float32 scalars. The jitted update reads
them there, so changing one mid-run (`with_hyperparams`) changes the next
update without recompiling it, and a checkpoint carries them.
"""

import dataclasses
from typing import Dict, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from infra.settings import at_least, boolean, integer, one_of, positive, setting, within

OPTIMIZERS = ('rmsprop', 'adam')
_MAX_HORIZON = 2**31 - 1   # the largest step count optax's int32 counter holds
# optimizer.clip_by: the clip on the whole gradient (in the chain), or on
# each term's gradient (the learner's sgd step; V-trace only).
CLIP_BY = ('global', 'term')

# The hyperparameters that can change mid-run: their key in
# opt_state.hyperparams -> the config field that sets them. 'eps' is the
# epsilon of the optimizer the config names.
HYPERPARAMETERS = ('learning_rate', 'entropy_cost', 'max_grad_norm', 'eps')


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  """The optimiser's settings (the config's `optimizer` group); the base
  learning rate and the entropy cost are top-level fields."""
  name: str = setting('rmsprop', "'rmsprop' (the rmsprop_* fields) or 'adam' (the adam_* fields)",
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
  momentum: float = setting(0.0, 'RMSProp momentum', at_least(0))
  warmup_updates: int = setting(
      0, 'learner updates over which the learning rate rises linearly, optimiser step by '
      "step, to its schedule's rate; 0: no warmup", integer(0))
  anneal_to: float = setting(
      0.0, 'the learning rate at the end of the run, as a fraction of its base: it falls '
      'linearly from the base to base x anneal_to; 0: to 0 (IMPALA, Cleanba), 1: constant',
      within(0, 1))
  max_grad_norm: float = setting(40.0, 'gradient-norm clip', positive)
  clip_by: str = setting(
      'global', "'global': the whole gradient's norm; 'term' (V-trace only): the policy's "
      "(policy gradient + entropy) and the value's gradients each clipped to max_grad_norm, "
      'then added', one_of(CLIP_BY))


def eps_field(optimizer_name: str) -> str:
  """The config field of the named optimiser's epsilon.

  Args:
    optimizer_name: one of OPTIMIZERS.

  Returns:
    'optimizer.adam_eps' for Adam, 'optimizer.rmsprop_eps' otherwise.
  """
  return 'optimizer.adam_eps' if optimizer_name == 'adam' else 'optimizer.rmsprop_eps'


def config_fields(optimizer_name: str) -> Dict[str, str]:
  """Where each injected hyperparameter comes from in the config.

  Args:
    optimizer_name: the config's optimiser, one of OPTIMIZERS.

  Returns:
    Config field -> its key in opt_state.hyperparams, one entry per key of
    HYPERPARAMETERS.
  """
  return {'learning_rate': 'learning_rate', 'entropy_cost': 'entropy_cost',
          'optimizer.max_grad_norm': 'max_grad_norm', eps_field(optimizer_name): 'eps'}


def make_optimizer(learning_rate: float, total_learner_steps: int,
                   max_grad_norm: float, decay: float, eps: float,
                   momentum: float, eps_in_sqrt: bool = True, initial_scale: float = 0.0,
                   name: str = 'rmsprop', adam_b1: float = 0.9, adam_b2: float = 0.999,
                   adam_eps: float = 1e-5, entropy_cost: Optional[float] = None,
                   clip_in_chain: bool = True, warmup_steps: int = 0, anneal_to: float = 0.0):
  """A global-norm clip, then RMSProp or Adam, the learning rate annealed.

  The learning rate falls linearly from its base to `anneal_to` x base (0 by
  default) over `total_learner_steps` optimiser steps, and stays there. The base learning rate,
  `max_grad_norm`, the optimiser's epsilon (`eps` for RMSProp, `adam_eps` for
  Adam) and `entropy_cost` (when not None; the loss reads it, see
  agents/learner.py) are injected hyperparameters: float32 values in
  `opt_state.hyperparams`, not constants of the compiled update. The anneal
  follows the optimiser's own step count, so a new base rate mid-run keeps the
  schedule's place. With `warmup_steps` W > 0 the rate of optimiser step n
  (counted from 0) is also multiplied by min(1, (n + 1) / W): the first
  step takes 1/W of the schedule's rate, step W - 1 and later all of it.

  RMSProp: `eps_in_sqrt` picks the denominator: sqrt(nu + eps) as
  TensorFlow's RMSProp (IMPALA's own code), or sqrt(nu) + eps as PyTorch's
  (TorchBeast). With eps = 0.01 and small gradients the first caps steps at
  lr * g / 0.1, the second at lr * g / 0.01.

  `initial_scale` is where RMSProp's second moment nu starts. optax's default
  0 makes the first step lr * g / sqrt(0.01 g^2) = 10 lr sign(g) for every
  parameter at once when eps is small, a step large enough to kill ReLU units
  (docs/pong.md, point 4). 1.0 is TensorFlow's RMSProp (IMPALA's and A2C's own
  code): steps start at lr * g and grow as nu forgets its start.

  Adam (optax.adam, PyTorch's form): bias-corrected moments, epsilon outside
  the square root (`adam_eps`; cleanrl's PPO uses 1e-5).

  Args:
    learning_rate: the base learning rate.
    total_learner_steps: optimiser steps over which the rate anneals to 0
      (at least 1 is used).
    max_grad_norm: the global-norm clip.
    decay: RMSProp's decay of its second moment.
    eps: RMSProp's epsilon.
    momentum: RMSProp's momentum; 0 for none.
    eps_in_sqrt: RMSProp's denominator, sqrt(nu + eps) when True, else
      sqrt(nu) + eps.
    initial_scale: RMSProp's initial second moment.
    name: the optimiser, one of OPTIMIZERS.
    adam_b1: Adam's first-moment decay.
    adam_b2: Adam's second-moment decay.
    adam_eps: Adam's epsilon.
    entropy_cost: the loss's entropy cost, kept in the state beside the other
      hyperparameters population-based training changes; None: not kept.
    clip_in_chain: False leaves the global-norm clip out of the chain;
      `max_grad_norm` stays an injected hyperparameter for the learner, which
      clips each term's gradient itself (rl/sgd.py, optimizer.clip_by='term').
    warmup_steps: W, optimiser steps of the linear warmup; 0 for none.
    anneal_to: the rate at the end as a fraction of the base, in [0, 1]: 0
      anneals to 0, 1 keeps the base rate.

  Returns:
    (optimizer, schedule): an optax GradientTransformation, and
    `schedule(step, base=learning_rate)`, the rate at optimiser step `step`
    for a base rate `base`.

  Raises:
    ValueError: `name` is not one of OPTIMIZERS, `warmup_steps` < 0, or
      `anneal_to` is outside [0, 1].
  """
  if name not in OPTIMIZERS:
    raise ValueError(f'unknown optimizer {name!r}; choose one of {", ".join(OPTIMIZERS)}')
  if warmup_steps < 0:
    raise ValueError(f'warmup_steps must be >= 0, got {warmup_steps}')
  if not 0.0 <= anneal_to <= 1.0:
    raise ValueError(f'anneal_to must be in [0, 1], got {anneal_to}')
  # optax counts steps in int32: a longer horizon (a run of 10**12 env steps,
  # as the benchmark's train stage sets) is the same as no decay at all.
  horizon = min(max(total_learner_steps, 1), _MAX_HORIZON)

  def schedule(step, base=learning_rate):
    # base (1 - (1 - anneal_to) min(1, step / horizon)): with the base as a
    # traced value, so a new base mid-run keeps the schedule's place.
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
  """The optimiser of a run's settings.

  It anneals over every optimiser step of the run (total_learner_steps x
  steps_per_update).

  Args:
    o: the optimiser's settings.
    learning_rate: the base learning rate (the config's learning_rate).
    entropy_cost: the entropy bonus's weight, injected (the config's
      entropy_cost).
    total_learner_steps: learner updates in the run.
    steps_per_update: optimiser steps per learner update
      (configs/spec.RunSpec.optimizer_steps_per_update).

  Returns:
    (optimizer, schedule) as `make_optimizer`, except that the schedule,
    `schedule(update, base=learning_rate)`, is indexed by learner update
    (what `LearnerState.step` counts), for logging.

  Raises:
    ValueError: `o.name` is not one of OPTIMIZERS.
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
  """One injected hyperparameter of an optimiser state.

  Args:
    opt_state: an optimiser state.
    key: a key of HYPERPARAMETERS.
    default: what to return when the state does not hold `key`.

  Returns:
    `opt_state.hyperparams[key]` (a float32 scalar for a state made here), or
    `default` for an optimiser without it (a bare optax chain).
  """
  return getattr(opt_state, 'hyperparams', {}).get(key, default)


def hyperparameters(opt_state) -> Dict[str, jnp.ndarray]:
  """The injected hyperparameters of an optimiser state made here.

  Args:
    opt_state: a state of an optimiser from `make_optimizer`.

  Returns:
    A new dict: key -> float32 scalar.
  """
  return dict(opt_state.hyperparams)


def with_hyperparameters(opt_state, values: Dict[str, float]):
  """An optimiser state with some injected hyperparameters set.

  The next update uses the new values without compiling again: each is cast
  to the old value's dtype and placed as the old one is (replicated over the
  learner mesh, or uncommitted).

  Args:
    opt_state: a state of an optimiser from `make_optimizer`.
    values: key of HYPERPARAMETERS present in the state -> its new value.

  Returns:
    `opt_state` with those hyperparameters replaced; the others unchanged.

  Raises:
    KeyError: a key the state does not hold; the message names those it holds.
  """
  current = opt_state.hyperparams
  for key in values:
    if key not in current:
      raise KeyError(f'{key!r} is not a hyperparameter of this optimiser state; it holds '
                     f'{", ".join(sorted(current))}')
  new = {k: (_like(np.asarray(values[k], v.dtype), v) if k in values else v)
         for k, v in current.items()}
  return opt_state._replace(hyperparams=new)


def _like(value: np.ndarray, old):
  """`value` placed as `old` is (replicated over the learner mesh, or
  uncommitted), so that the jitted update sees the same input types and
  does not compile again."""
  if getattr(old, 'committed', False):
    return jax.device_put(value, old.sharding)
  return jnp.asarray(value)
