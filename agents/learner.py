"""The learner: state, optimiser, and one jitted update sharded over devices.

The update is written as a per-device function with named-axis collectives,
exactly as a `jax.pmap` body, and run with `jax.jit(jax.shard_map(...))` over
a 1-D mesh of the learner devices; the global batch is split along its batch
axis. `check_vma=False` gives the pmap semantics: inside the body, gradients
with respect to the replicated parameters are per-device and are reduced
explicitly.
"""

import functools
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from networks import centring
from rl import algorithms
from rl import impala
from rl import optimizers as optimizers_lib
from rl import popart
from rl.actor_critic import LossConfig
from rl.types import BATCH_AXES, Unroll

AXIS = 'learner'


class LearnerState(NamedTuple):
  """Everything the learner owns; replaced by each update, never mutated."""
  params: Any            # Flax 'params' collection
  popart: Any            # Flax 'popart' collection: {value head name: {'mu', 'nu'}}
  opt_state: Any
  step: jax.Array        # learner steps taken (int32 scalar)
  # What the learner keeps between updates (rl/actor_critic.Learner.init_state),
  # saved and restored with the checkpoint; () for IMPALA and PPO, which keep none.
  algorithm: Any = ()


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


def build_update(apply_fn: Callable, optimizer, schedule, loss_cfg: LossConfig,
                 value_head: str, mesh: Mesh, max_grad_norm: float = float('inf'),
                 seed: int = 0):
  """Returns jitted update(state, batch) -> (state, metrics).

  `apply_fn(params, popart_stats, obs, first, core_state)` runs the network
  (with networks.agent.apply_fn(..., with_health=True) the metrics include
  the network's health, rl/health.py); `value_head` names the value
  head's entry in params and the popart collection. `loss_cfg.name` picks
  the learner from the table (rl/algorithms.py): its update takes the
  batch's optimiser steps (rl/sgd.py), reading the learning rate, clip,
  epsilon and entropy cost from the optimiser state's injected
  hyperparameters (rl/optimizers.py), so setting them mid-run needs no
  recompilation. `seed` and the learner step seed its shuffles.
  `max_grad_norm` (the optimiser's clip, when the optimiser state does not
  hold one) only feeds the 'grad_clipped' metric.
  """
  learner = algorithms.get(loss_cfg.name)
  algorithm_update = learner.make_update(
      apply_fn, loss_cfg, optimizer, value_head, AXIS, seed, max_grad_norm)

  def per_device_update(state: LearnerState, batch: Unroll):
    stats = state.popart[value_head]
    args = (_centred(state.params, batch), state.opt_state, stats, batch, state.step)
    if learner.init_state is None:
      params, opt_state, new_stats, metrics = algorithm_update(*args)
      algorithm_state = state.algorithm
    else:
      params, opt_state, new_stats, metrics, algorithm_state = algorithm_update(
          *args, state.algorithm)
    state = state._replace(algorithm=algorithm_state)
    return _finish(state, params, opt_state, value_head, new_stats, metrics, schedule)

  sharded = jax.shard_map(
      per_device_update, mesh=mesh,
      in_specs=(P(), _BATCH_SPECS), out_specs=(P(), P()),
      check_vma=False)
  # Said explicitly, so that a program exported for other devices
  # (jax.export) records it too: the new state and the metrics are
  # replicated over the learner mesh.
  return jax.jit(sharded, out_shardings=NamedSharding(mesh, P()))


def build_task_gradients(apply_fn: Callable, loss_cfg: LossConfig, value_head: str):
  """Returns jitted report(params, stats, batch) -> {'task/grad_*': [K]}:
  each task's policy-gradient and value gradient norms on the shared
  modules (every top-level module but the two heads) of one device's
  params, on a few host unrolls (rl/impala.task_gradient_norms)."""
  heads = ('policy_head', value_head)

  @jax.jit
  def report(params, stats, batch: Unroll):
    shared = tuple(name for name in params if name not in heads)
    return impala.task_gradient_norms(apply_fn, loss_cfg, params, stats, batch, shared)

  return report


def _centred(params, batch: Unroll):
  """Params with a centring torso's mean frames moved to include the batch's
  frames (networks/centring.py), before the update's gradient steps; other
  params unchanged."""
  if 'frames' not in batch.obs:
    return params
  return centring.update(params, batch.obs['frames'], batch.task_id, AXIS)


def _finish(state, params, opt_state, value_head, new_stats, metrics, schedule):
  hyper = functools.partial(optimizers_lib.hyperparameter, state.opt_state)
  base_rate = hyper('learning_rate')
  metrics['learning_rate'] = schedule(state.step) if base_rate is None else schedule(
      state.step, base_rate)
  for key in optimizers_lib.HYPERPARAMETERS:  # the base rate, not the annealed one above
    if hyper(key) is not None:
      metrics[f'hparams/{key}'] = hyper(key)
  metrics['popart/mu'] = new_stats['mu']
  metrics['popart/sigma'] = popart.sigma(new_stats)
  # What a checkpoint would hold must be finite (agents/trainer.FINITE_CHECKS): a
  # NaN learning rate leaves the loss finite and the new params NaN.
  metrics['nonfinite/state'] = sum(
      jnp.sum(~jnp.isfinite(x)).astype(jnp.float32)
      for x in jax.tree.leaves((params, opt_state, new_stats))
      if jnp.issubdtype(x.dtype, jnp.inexact))
  new_state = LearnerState(
      params=params,
      popart={**state.popart, value_head: new_stats},
      opt_state=opt_state,
      step=state.step + 1,
      algorithm=state.algorithm)
  return new_state, metrics


def init_state(variables, optimizer, mesh: Mesh, algorithm=()) -> LearnerState:
  """Learner state replicated over the mesh; `algorithm`: the learner's own
  initial state (rl/actor_critic.Learner.init_state)."""
  state = LearnerState(
      params=variables['params'], popart=variables['popart'],
      opt_state=optimizer.init(variables['params']),
      step=jnp.zeros((), jnp.int32), algorithm=algorithm)
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
