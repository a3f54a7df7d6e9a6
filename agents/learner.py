"""The learner: state, optimiser, and one jitted update sharded over devices
(the Sebulba learner of Hessel et al. 2021, arXiv 2104.06272).

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
from rl import task_gradients
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
  """The 1-D learner mesh over `devices`, its one axis named AXIS."""
  return Mesh(np.asarray(devices), (AXIS,))


def _batch_spec(axis: int) -> P:
  return P(*([None] * axis), AXIS)


# shard_map in_specs for an Unroll: each field split along its batch axis.
_BATCH_SPECS = Unroll(*[_batch_spec(axis) for axis in BATCH_AXES])


def batch_sharding(mesh: Mesh, unroll: Unroll):
  """NamedShardings that split every field of an unroll along its batch axis.

  Args:
    mesh: the learner mesh.
    unroll: an Unroll (only its structure is read).

  Returns:
    An Unroll of NamedShardings, one per leaf: each field split over AXIS
    along its batch axis (rl/types.BATCH_AXES).
  """
  return Unroll(*[jax.tree.map(lambda _, spec=spec: NamedSharding(mesh, spec), field)
                  for field, spec in zip(unroll, _BATCH_SPECS)])


def build_update(apply_fn: Callable, optimizer, schedule, loss_cfg: LossConfig,
                 value_head: str, mesh: Mesh, max_grad_norm: float = float('inf'),
                 seed: int = 0):
  """The learner's jitted update, sharded over the mesh.

  Each device runs the update on its shard of the batch with collectives
  over AXIS (shard_map, pmap semantics). A centring torso's mean frames are
  first moved to include the batch's frames (networks/centring.update);
  then the learner's update takes the batch's optimiser steps (rl/sgd.py),
  reading the learning rate, clip, epsilon and entropy cost from the
  optimiser state's injected hyperparameters (rl/optimizers.py), so setting
  them mid-run needs no recompilation. The new state and the metrics are
  replicated over the mesh.

  Args:
    apply_fn: `apply_fn(params, popart_stats, obs, first, core_state)` runs
      the network; with networks.agent.apply_fn(..., with_health=True) the
      metrics include the network's health (rl/health.py).
    optimizer: the optax optimiser.
    schedule: the learning rate by learner step, schedule(step) or
      schedule(step, base_rate) when the optimiser state holds the base
      rate.
    loss_cfg: the loss settings; `loss_cfg.name` picks the learner from the
      table (rl/algorithms.py).
    value_head: the value head's entry in params and the popart collection.
    mesh: the learner mesh (make_mesh).
    max_grad_norm: the optimiser's clip, when the optimiser state does not
      hold one; it only feeds the 'grad_clipped' metric.
    seed: with the learner step, seeds the update's shuffles.

  Returns:
    update(state, batch) -> (state, metrics): `batch` an Unroll sharded as
    batch_sharding says (shard_batch); the state's step goes up by 1. The
    metrics hold the learner's, 'learning_rate', 'hparams/<name>' for each
    injected hyperparameter, 'popart/mu' and 'popart/sigma' [K], and
    'nonfinite/state', the count of non-finite values in the new params,
    optimiser state and PopArt statistics.
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
  """The jitted per-task gradient report of multi-task V-trace runs.

  Args:
    apply_fn: the network's apply in the learner's form, without health.
    loss_cfg: the loss settings.
    value_head: the value head's entry in params; it and 'policy_head' are
      the heads, every other top-level module is shared.

  Returns:
    report(params, stats, batch) -> {'task/grad_*': [K]}: each task's
    policy-gradient and value gradient norms on the shared modules of one
    device's params (local_copy), on a few host unrolls
    (rl/task_gradients.task_gradient_norms).
  """
  heads = ('policy_head', value_head)

  @jax.jit
  def report(params, stats, batch: Unroll):
    shared = tuple(name for name in params if name not in heads)
    return task_gradients.task_gradient_norms(apply_fn, loss_cfg, params, stats, batch, shared)

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
  # What a checkpoint would hold must be finite (agents/update_checks.FINITE_CHECKS): a
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
  """The initial learner state, replicated over the mesh.

  Args:
    variables: the network's initial {'params', 'popart', ...}.
    optimizer: the optax optimiser; its state is initialised from the
      params.
    mesh: the learner mesh.
    algorithm: the learner's own initial state
      (rl/actor_critic.Learner.init_state); () for IMPALA and PPO.

  Returns:
    A LearnerState at step 0 (int32), every leaf replicated over `mesh`.
  """
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

  Args:
    batch: this process's Unroll of host arrays.
    mesh: the learner mesh.

  Returns:
    The Unroll as global jax.Arrays sharded by batch_sharding.
  """
  shardings = batch_sharding(mesh, batch)
  if jax.process_count() == 1:
    return jax.device_put(batch, shardings)
  return jax.tree.map(jax.make_array_from_process_local_data, shardings, batch)


def local_copy(tree):
  """This process's copy of a replicated pytree.

  What actors, checks and analyses read, with one or many processes.

  Args:
    tree: a pytree of replicated jax.Arrays.

  Returns:
    The same tree of single-device arrays: each leaf's first addressable
    shard (on this process's first learner device).
  """
  return jax.tree.map(lambda x: x.addressable_data(0), tree)
