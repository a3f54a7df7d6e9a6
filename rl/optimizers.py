"""The optimiser: a global-norm clip, then RMSProp or Adam, the learning rate
annealed linearly to 0 over the run's optimiser steps."""

import optax

OPTIMIZERS = ('rmsprop', 'adam')


def make_optimizer(learning_rate: float, total_learner_steps: int,
                   max_grad_norm: float, decay: float, eps: float,
                   momentum: float, eps_in_sqrt: bool = True, initial_scale: float = 0.0,
                   name: str = 'rmsprop', adam_b1: float = 0.9, adam_b2: float = 0.999,
                   adam_eps: float = 1e-5):
  """Global-norm clip, then RMSProp or Adam, the learning rate annealed
  linearly to 0 over `total_learner_steps` optimiser steps.

  RMSProp: `eps_in_sqrt` picks the denominator: sqrt(nu + eps) as
  TensorFlow's RMSProp (IMPALA's own code), or sqrt(nu) + eps as PyTorch's
  (TorchBeast). With eps = 0.01 and small gradients the first caps steps at
  lr * g / 0.1, the second at lr * g / 0.01.

  `initial_scale` is where RMSProp's second moment nu starts. optax's default
  0 makes the first step lr * g / sqrt(0.01 g^2) = 10 lr sign(g) for every
  parameter at once when eps is small (with eps 1e-5 on Pong: a KL of 1.9
  in one update, and most ReLU units dead within a few updates;
  docs/pong.md, point 4). 1.0 is TensorFlow's RMSProp (IMPALA's and A2C's own code): steps
  start at lr * g and grow as nu forgets its start.

  Adam (optax.adam, PyTorch's form): bias-corrected moments, epsilon
  outside the square root (`adam_eps`; cleanrl's PPO uses 1e-5).
  """
  schedule = optax.linear_schedule(learning_rate, 0.0, max(total_learner_steps, 1))
  if name == 'adam':
    opt = optax.adam(schedule, b1=adam_b1, b2=adam_b2, eps=adam_eps)
  elif name == 'rmsprop':
    opt = optax.rmsprop(schedule, decay=decay, eps=eps, eps_in_sqrt=eps_in_sqrt,
                        initial_scale=initial_scale,
                        momentum=momentum if momentum > 0 else None)
  else:
    raise ValueError(f'unknown optimizer {name!r}; choose one of {", ".join(OPTIMIZERS)}')
  return optax.chain(optax.clip_by_global_norm(max_grad_norm), opt), schedule


def optimizer_steps_per_update(config) -> int:
  """Optimiser steps per learner update: epochs x minibatches of the loss's group."""
  group = config.ppo if config.loss.name == 'ppo' else config.vtrace
  return group.epochs * group.minibatches


def optimizer_from_config(config, total_learner_steps: int):
  """(optimizer, schedule) from a run config's learning_rate and `optimizer`
  group. The optimiser anneals over every optimiser step of the run; the
  schedule returned is indexed by learner update (what `LearnerState.step`
  counts), for logging."""
  o = config.optimizer
  k = optimizer_steps_per_update(config)
  optimizer, schedule = make_optimizer(
      config.learning_rate, total_learner_steps * k, o.max_grad_norm, o.rmsprop_decay,
      o.rmsprop_eps, o.momentum, o.eps_in_sqrt, o.rmsprop_initial_scale, name=o.name,
      adam_b1=o.adam_b1, adam_b2=o.adam_b2, adam_eps=o.adam_eps)
  return optimizer, (schedule if k == 1 else lambda step: schedule(step * k))
