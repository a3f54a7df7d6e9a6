"""The learner: state, optimiser, and one jitted update sharded over devices
(the Sebulba learner of Hessel et al. 2021, arXiv 2104.06272).

The update is a per-device function with named-axis collectives, as a `jax.pmap` body, run with
`jax.jit(jax.shard_map(..., check_vma=False))` over a 1-D mesh; gradients of the replicated
parameters are per-device there and are reduced explicitly.
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
  return Mesh(np.asarray(devices), (AXIS,))


def _batch_spec(axis: int) -> P:
  return P(*([None] * axis), AXIS)


# shard_map in_specs for an Unroll: each field split along its batch axis.
_BATCH_SPECS = Unroll(*[_batch_spec(axis) for axis in BATCH_AXES])


def batch_sharding(mesh: Mesh, unroll: Unroll):
  """Unroll of NamedShardings, each field split over AXIS on its batch axis (types.BATCH_AXES)."""
  return Unroll(*[jax.tree.map(lambda _, spec=spec: NamedSharding(mesh, spec), field)
                  for field, spec in zip(unroll, _BATCH_SPECS)])


def build_update(apply_fn: Callable, optimizer, schedule, loss_cfg: LossConfig,
                 value_head: str, mesh: Mesh, max_grad_norm: float = float('inf'),
                 seed: int = 0):
  """The learner's jitted update, sharded over the mesh.

  Args:
    apply_fn: `apply_fn(params, popart_stats, obs, first, core_state)`.
    schedule: schedule(step), or schedule(step, base_rate) when the optimiser state holds base_rate.
    value_head: the value head's entry in params and the popart collection.
    max_grad_norm: the clip if the optimiser state holds none; only feeds the 'grad_clipped' metric.
    seed: with the learner step, seeds the update's shuffles.

  Returns:
    update(state, batch) -> (state, metrics), `batch` sharded by `shard_batch`, both outputs
    replicated. The metrics add 'learning_rate', 'hparams/<name>', 'popart/mu' and 'popart/sigma'
    [K], and 'nonfinite/state' (non-finite values in the new state).
  """
  learner = algorithms.get(loss_cfg.name)
  algorithm_update = learner.make_update(
      apply_fn, loss_cfg, optimizer, value_head, AXIS, seed, max_grad_norm)

  def per_device_update(state: LearnerState, batch: Unroll):
    stats = state.popart[value_head]
    params, opt_state, new_stats, metrics, algorithm_state = algorithm_update(
        _centred(state.params, batch), state.opt_state, stats, batch, state.step,
        state.algorithm)
    state = state._replace(algorithm=algorithm_state)
    return _finish(state, params, opt_state, value_head, new_stats, metrics, schedule)

  sharded = jax.shard_map(
      per_device_update, mesh=mesh,
      in_specs=(P(), _BATCH_SPECS), out_specs=(P(), P()),
      check_vma=False)
  # Explicit, so a program exported with jax.export records it too.
  return jax.jit(sharded, out_shardings=NamedSharding(mesh, P()))


def build_task_gradients(learner, apply_fn: Callable, loss_cfg: LossConfig, value_head: str):
  """The jitted per-task gradient report of a multi-task run whose learner
  splits its loss by term (rl/actor_critic.Learner.term_loss).

  Returns:
    report(params, stats, batch) -> {'task/grad_*': [K]}: each task's policy and value gradient
    norms on the modules other than the two heads, for one device's params on host unrolls.
  """
  heads = ('policy_head', value_head)

  @jax.jit
  def report(params, stats, batch: Unroll):
    shared = tuple(name for name in params if name not in heads)
    return task_gradients.task_gradient_norms(learner, apply_fn, loss_cfg, params, stats, batch,
                                              shared)

  return report


def _centred(params, batch: Unroll):
  """Params with a centring torso's mean frames moved to include the batch's
  frames (networks/centring.py); other params unchanged."""
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
  """The LearnerState at step 0, every leaf replicated over `mesh`; `algorithm`
  is the learner's own state (() for IMPALA and PPO)."""
  state = LearnerState(
      params=variables['params'], popart=variables['popart'],
      opt_state=optimizer.init(variables['params']),
      step=jnp.zeros((), jnp.int32), algorithm=algorithm)
  return jax.device_put(state, NamedSharding(mesh, P()))


def shard_batch(batch: Unroll, mesh: Mesh) -> Unroll:
  """This process's Unroll of host arrays as its shard of the global batch: the
  processes' batches side by side in process order, sharded by batch_sharding."""
  shardings = batch_sharding(mesh, batch)
  if jax.process_count() == 1:
    return jax.device_put(batch, shardings)
  return jax.tree.map(jax.make_array_from_process_local_data, shardings, batch)


def local_copy(tree):
  """This process's copy of a replicated pytree: each leaf's first addressable shard."""
  return jax.tree.map(lambda x: x.addressable_data(0), tree)
