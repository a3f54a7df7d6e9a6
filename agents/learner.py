"""The learner: state, optimiser, and one jitted update sharded over devices.

The update is written as a per-device function with named-axis collectives,
exactly as a `jax.pmap` body, and run with `jax.jit(jax.shard_map(...))` over
a 1-D mesh of the learner devices; the global batch is split along its batch
axis. `check_vma=False` gives the pmap semantics: inside the body, gradients
with respect to the replicated parameters are per-device and are reduced
explicitly.
"""

from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from agents import losses
from agents import popart
from agents.types import BATCH_AXES, Unroll

AXIS = 'learner'


class LearnerState(NamedTuple):
  """Everything the learner owns; replaced by each update, never mutated."""
  params: Any            # Flax 'params' collection
  popart: Any            # Flax 'popart' collection: {value head name: {'mu', 'nu'}}
  opt_state: Any
  step: jax.Array        # learner steps taken (int32 scalar)


def make_optimizer(learning_rate: float, total_learner_steps: int,
                   max_grad_norm: float, decay: float, eps: float,
                   momentum: float, eps_in_sqrt: bool = True, initial_scale: float = 0.0):
  """Global-norm clip, then RMSProp with a learning rate annealed linearly to 0.

  `eps_in_sqrt` picks the denominator: sqrt(nu + eps) as TensorFlow's RMSProp
  (IMPALA's own code), or sqrt(nu) + eps as PyTorch's (TorchBeast). With
  eps = 0.01 and small gradients the first caps steps at lr * g / 0.1, the
  second at lr * g / 0.01.

  `initial_scale` is where RMSProp's second moment nu starts. optax's default
  0 makes the first step lr * g / sqrt(0.01 g^2) = 10 lr sign(g) for every
  parameter at once when eps is small (with eps 1e-5 on Pong: a KL of 1.9
  in one update, and most ReLU units dead within a few updates; README,
  Atari). 1.0 is TensorFlow's RMSProp (IMPALA's and A2C's own code): steps
  start at lr * g and grow as nu forgets its start.
  """
  schedule = optax.linear_schedule(learning_rate, 0.0, max(total_learner_steps, 1))
  return optax.chain(
      optax.clip_by_global_norm(max_grad_norm),
      optax.rmsprop(schedule, decay=decay, eps=eps, eps_in_sqrt=eps_in_sqrt,
                    initial_scale=initial_scale,
                    momentum=momentum if momentum > 0 else None),
  ), schedule


def optimizer_from_config(config, total_learner_steps: int):
  """make_optimizer from a run config's learning_rate and `optimizer` group."""
  o = config.optimizer
  return make_optimizer(config.learning_rate, total_learner_steps, o.max_grad_norm,
                        o.rmsprop_decay, o.rmsprop_eps, o.momentum, o.eps_in_sqrt,
                        o.rmsprop_initial_scale)


def make_mesh(devices: Sequence[jax.Device]) -> Mesh:
  return Mesh(np.asarray(devices), (AXIS,))


def _batch_spec(axis: int) -> P:
  return P(*([None] * axis), AXIS)


# shard_map in_specs for an Unroll: each field split along its batch axis.
_BATCH_SPECS = Unroll(*[_batch_spec(axis) for axis in BATCH_AXES])


def batch_sharding(mesh: Mesh, unroll: Unroll):
  """NamedShardings that split every field of an unroll along its batch axis."""
  return Unroll(*[jax.tree.map(lambda _, spec=spec: NamedSharding(mesh, spec), field)
                  for field, spec in zip(unroll, _BATCH_SPECS)])


def build_update(apply_fn: Callable, optimizer, schedule,
                 loss_cfg: losses.LossConfig, value_head: str, mesh: Mesh,
                 max_grad_norm: float = float('inf')):
  """Returns jitted update(state, batch) -> (state, metrics).

  `apply_fn(params, popart_stats, obs, first, core_state)` runs the network;
  `value_head` names the value head's entry in params and the popart collection.
  `max_grad_norm` (the optimiser's clip) only feeds the 'grad_clipped'
  metric: 1 when the clip binds on this update, else 0.
  """
  loss_fn = losses.impala_loss(apply_fn, loss_cfg, axis_name=AXIS)

  def per_device_update(state: LearnerState, batch: Unroll):
    stats = state.popart[value_head]
    grads, out = jax.grad(loss_fn, has_aux=True)(state.params, stats, batch)
    # The loss sums over the global batch, so its gradient is the sum of the
    # per-device gradients (the device mean times the device count).
    grads = jax.lax.psum(grads, AXIS)
    grad_norm = optax.tree.norm(grads)

    params = state.params
    new_stats = out.new_stats
    if loss_cfg.popart_enabled:
      params = {**params, value_head: popart.preserve_outputs(
          params[value_head], stats, new_stats)}
      # The gradient was taken at the head before its rescale; at the rescaled
      # head (w' = w sigma / sigma') the gradient is sigma' / sigma times it.
      ratio = popart.sigma(new_stats) / popart.sigma(stats)
      grads = {**grads, value_head: jax.tree.map(lambda g: g * ratio,
                                                 grads[value_head])}
    updates, opt_state = optimizer.update(grads, state.opt_state, params)
    params = optax.apply_updates(params, updates)

    metrics = dict(out.metrics)
    metrics['grad_norm'] = grad_norm
    metrics['grad_clipped'] = (grad_norm > max_grad_norm).astype(jnp.float32)
    metrics['learning_rate'] = schedule(state.step)
    metrics['popart/mu'] = new_stats['mu']
    metrics['popart/sigma'] = popart.sigma(new_stats)
    new_state = LearnerState(
        params=params,
        popart={**state.popart, value_head: new_stats},
        opt_state=opt_state,
        step=state.step + 1)
    return new_state, metrics

  sharded = jax.shard_map(
      per_device_update, mesh=mesh,
      in_specs=(P(), _BATCH_SPECS), out_specs=(P(), P()),
      check_vma=False)
  return jax.jit(sharded)


def init_state(variables, optimizer, mesh: Mesh) -> LearnerState:
  """Learner state replicated over the mesh."""
  state = LearnerState(
      params=variables['params'], popart=variables['popart'],
      opt_state=optimizer.init(variables['params']),
      step=jnp.zeros((), jnp.int32))
  return jax.device_put(state, NamedSharding(mesh, P()))


def shard_batch(batch: Unroll, mesh: Mesh) -> Unroll:
  """This process's unrolls as its shard of the global batch.

  With one process the batch is the global batch. With several, each
  process's rows go to its own learner devices and the global batch is the
  processes' batches side by side in process order.
  """
  shardings = batch_sharding(mesh, batch)
  if jax.process_count() == 1:
    return jax.device_put(batch, shardings)
  return jax.tree.map(jax.make_array_from_process_local_data, shardings, batch)


def local_copy(tree):
  """This process's copy of a replicated pytree (on its first learner
  device): what actors, checks and analyses read, with one or many processes."""
  return jax.tree.map(lambda x: x.addressable_data(0), tree)
