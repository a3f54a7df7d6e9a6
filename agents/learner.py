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
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from networks import centring
from rl import losses
from rl import popart
from rl import ppo
from rl import optimizers as optimizers_lib
from rl.types import BATCH_AXES, Unroll

AXIS = 'learner'


class LearnerState(NamedTuple):
  """Everything the learner owns; replaced by each update, never mutated."""
  params: Any            # Flax 'params' collection
  popart: Any            # Flax 'popart' collection: {value head name: {'mu', 'nu'}}
  opt_state: Any
  step: jax.Array        # learner steps taken (int32 scalar)


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
                 max_grad_norm: float = float('inf'), seed: int = 0):
  """Returns jitted update(state, batch) -> (state, metrics).

  `apply_fn(params, popart_stats, obs, first, core_state)` runs the network
  (with networks.agent.apply_fn(..., with_health=True) the metrics include
  the network's health, rl/health.py); `value_head` names the value
  head's entry in params and the popart collection. The learning rate,
  clip threshold, epsilon and entropy cost are read from the optimiser
  state's injected hyperparameters (rl/optimizers.py) at every update, so
  setting them mid-run needs no recompilation. `loss_cfg.name` picks
  the IMPALA update (epochs x minibatches of whole unrolls, 1 x 1 by
  default) or PPO's (epochs x minibatches steps); `seed` and the learner
  step seed their shuffles.
  `max_grad_norm` (the optimiser's clip, when the optimiser state does not
  hold one) only feeds the 'grad_clipped' metric: 1 when the clip binds on
  a step, else 0.
  """
  if loss_cfg.name == 'ppo':
    per_device_update = _ppo_update(apply_fn, optimizer, schedule, loss_cfg, value_head,
                                    max_grad_norm, seed)
  elif loss_cfg.name == 'impala':
    per_device_update = _impala_update(apply_fn, optimizer, schedule, loss_cfg, value_head,
                                       max_grad_norm, seed)
  else:
    raise ValueError(f'unknown loss {loss_cfg.name!r}; choose one of {", ".join(losses.LOSS_NAMES)}')
  sharded = jax.shard_map(
      per_device_update, mesh=mesh,
      in_specs=(P(), _BATCH_SPECS), out_specs=(P(), P()),
      check_vma=False)
  # Said explicitly, so that a program exported for other devices
  # (jax.export) records it too: the new state and the metrics are
  # replicated over the learner mesh.
  return jax.jit(sharded, out_shardings=NamedSharding(mesh, P()))


def _centred(params, batch: Unroll):
  """Params with a centring torso's mean frames moved to include the batch's
  frames (networks/centring.py), before the update's gradient steps; other
  params unchanged."""
  if 'frames' not in batch.obs:
    return params
  return centring.update(params, batch.obs['frames'], batch.task_id, AXIS)


def _step_metrics(grad_norm, max_grad_norm, opt_state):
  clip = _hyper(opt_state, 'max_grad_norm', max_grad_norm)
  return {'grad_norm': grad_norm, 'grad_clipped': (grad_norm > clip).astype(jnp.float32)}


def _hyper(opt_state, key: str, default=None):
  """An injected hyperparameter of the optimiser state (rl/optimizers.py),
  or `default` for an optimiser without it."""
  return getattr(opt_state, 'hyperparams', {}).get(key, default)


def _impala_update(apply_fn, optimizer, schedule, loss_cfg, value_head, max_grad_norm, seed):
  """IMPALA: epochs x minibatches optimiser steps per batch (1 x 1 by
  default, the paper's one step per batch). Each minibatch holds whole
  unrolls and its V-trace targets, importance weights and PopArt move are
  taken with the params of its own step (Cleanba's minibatches): V-trace
  corrects for the policy having moved since the actors acted."""
  loss_fn = losses.impala_loss(apply_fn, loss_cfg, axis_name=AXIS)
  cfg = loss_cfg.vtrace

  def sgd_step(carry, minibatch):
    params, opt_state, stats = carry
    grads, out = jax.grad(loss_fn, has_aux=True)(params, stats, minibatch,
                                                 _hyper(opt_state, 'entropy_cost'))
    # The loss sums over the global (mini)batch, so its gradient is the sum
    # of the per-device gradients (the device mean times the device count).
    grads = jax.lax.psum(grads, AXIS)
    grad_norm = optax.tree.norm(grads)
    new_stats = out.new_stats
    if loss_cfg.popart_enabled:
      params = {**params, value_head: popart.preserve_outputs(
          params[value_head], stats, new_stats)}
      # The gradient was taken at the head before its rescale; at the rescaled
      # head (w' = w sigma / sigma') the gradient is sigma' / sigma times it.
      ratio = popart.sigma(new_stats) / popart.sigma(stats)
      grads = {**grads, value_head: jax.tree.map(lambda g: g * ratio,
                                                 grads[value_head])}
    step_metrics = _step_metrics(grad_norm, max_grad_norm, opt_state)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    metrics = {**out.metrics, **step_metrics}
    return (params, opt_state, new_stats), (metrics, out.extras['log_pi'])

  def per_device_update(state: LearnerState, batch: Unroll):
    stats = state.popart[value_head]
    carry = (_centred(state.params, batch), state.opt_state, stats)
    if cfg.epochs == 1 and cfg.minibatches == 1:
      carry, (metrics, log_pi) = sgd_step(carry, batch)
      params, opt_state, new_stats = carry
      first = batch
    else:
      # The same key on every device: each shuffles its own shard alike.
      key = jax.random.fold_in(jax.random.key(seed), state.step)
      parts = [split_unrolls(batch, cfg.minibatches, k)
               for k in jax.random.split(key, cfg.epochs)]
      minibatches = jax.tree.map(lambda *xs: jnp.concatenate(xs), *parts)
      (params, opt_state, new_stats), (step_metrics, log_pis) = jax.lax.scan(
          sgd_step, carry, minibatches)
      # Means over the update's epochs x minibatches optimiser steps.
      metrics = jax.tree.map(jnp.mean, step_metrics)
      first, log_pi = jax.tree.map(lambda x: x[0], (minibatches, log_pis))
    metrics['kl_update'] = _update_kl(apply_fn, params, new_stats, first, log_pi)
    return _finish(state, params, opt_state, value_head, new_stats, metrics, schedule)

  return per_device_update


# Unrolls of the first minibatch whose policy `kl_update` compares before and
# after the update: a fixed few, so it costs a small share of an update.
KL_UNROLLS = 4


def _update_kl(apply_fn, params, stats, minibatch: Unroll, log_pi_before):
  """KL(pi_before || pi_after) of one update, averaged over the valid steps
  of the first KL_UNROLLS unrolls (per device) of its first minibatch:
  `log_pi_before` is that minibatch's policy at the update's first step,
  taken with the params the update started from. How far one update moves
  the policy (PPO's approx_kl for V-trace); the behaviour KL adds the lag."""
  k = min(KL_UNROLLS, minibatch.action.shape[1])
  part = jax.tree.map(lambda x: x[:, :k], minibatch._replace(core_state=None))
  core = jax.tree.map(lambda x: x[:k], minibatch.core_state)
  logits = apply_fn(params, stats, part.obs, part.first, core)[0][:-1]
  log_pi_after = jax.nn.log_softmax(jax.lax.stop_gradient(logits))
  before = jax.lax.stop_gradient(log_pi_before[:, :k])
  mask = 1.0 - part.first[1:].astype(jnp.float32)   # the loss's reset steps are not actions of a policy
  kl = jnp.sum(jnp.exp(before) * (before - log_pi_after), axis=-1)
  sums = jax.lax.psum((jnp.sum(mask * kl), jnp.sum(mask)), AXIS)
  return sums[0] / jnp.maximum(sums[1], 1.0)


def split_unrolls(batch: Unroll, num: int, key) -> Unroll:
  """A device's shard as `num` minibatches of whole unrolls, shuffled,
  stacked on a leading axis: fields [num, T + 1, B / num, ...], core
  state [num, B / num, ...]."""
  b = batch.action.shape[1]
  size = b // num
  idx = jax.random.permutation(key, b)[:num * size].reshape(num, size)
  take = lambda x: jnp.moveaxis(x[:, idx], 1, 0)   # [T+1, B, ...] -> [num, T+1, size, ...]
  return Unroll(obs=jax.tree.map(take, batch.obs), first=take(batch.first),
                action=take(batch.action), behaviour_logits=take(batch.behaviour_logits),
                reward=take(batch.reward), discount=take(batch.discount),
                task_id=take(batch.task_id),
                core_state=jax.tree.map(lambda x: x[idx], batch.core_state))


def _finish(state, params, opt_state, value_head, new_stats, metrics, schedule):
  base_rate = _hyper(state.opt_state, 'learning_rate')
  metrics['learning_rate'] = schedule(state.step) if base_rate is None else schedule(
      state.step, base_rate)
  for key in optimizers_lib.HYPERPARAMETERS:  # the base rate, not the annealed one above
    if _hyper(state.opt_state, key) is not None:
      metrics[f'hparams/{key}'] = _hyper(state.opt_state, key)
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
      step=state.step + 1)
  return new_state, metrics


def _ppo_update(apply_fn, optimizer, schedule, loss_cfg, value_head, max_grad_norm, seed):
  """PPO: targets and PopArt once per batch, then epochs x minibatches steps."""
  targets_fn = ppo.targets_fn(apply_fn, loss_cfg, axis_name=AXIS)
  loss_fn = ppo.loss_fn(apply_fn, loss_cfg, axis_name=AXIS)
  cfg = loss_cfg.ppo

  def sgd_step(stats, carry, minibatch):
    params, opt_state = carry
    grads, metrics = jax.grad(loss_fn, has_aux=True)(params, stats, minibatch,
                                                     _hyper(opt_state, 'entropy_cost'))
    grads = jax.lax.psum(grads, AXIS)  # the loss sums (or averages) over the global minibatch
    grad_norm = optax.tree.norm(grads)
    step_metrics = _step_metrics(grad_norm, max_grad_norm, opt_state)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return (params, opt_state), {**metrics, **step_metrics}

  def per_device_update(state: LearnerState, batch: Unroll):
    stats = state.popart[value_head]
    params = _centred(state.params, batch)
    new_stats, targets, metrics = targets_fn(params, stats, batch)
    if loss_cfg.popart_enabled:  # once per batch; the epochs see the rescaled head
      params = {**params, value_head: popart.preserve_outputs(
          params[value_head], stats, new_stats)}
    # The same key on every device: each shuffles its own shard alike.
    key = jax.random.fold_in(jax.random.key(seed), state.step)

    def epoch(carry, epoch_key):
      minibatches = split_minibatches(batch, targets, cfg.minibatches, cfg.split, epoch_key)
      return jax.lax.scan(functools.partial(sgd_step, new_stats), carry, minibatches)

    (params, opt_state), step_metrics = jax.lax.scan(
        epoch, (params, state.opt_state), jax.random.split(key, cfg.epochs))
    # Means over the update's epochs x minibatches optimiser steps.
    metrics.update(jax.tree.map(jnp.mean, step_metrics))
    return _finish(state, params, opt_state, value_head, new_stats, metrics, schedule)

  return per_device_update


def split_minibatches(batch: Unroll, targets: ppo.Targets, num: int, split: str, key
                      ) -> ppo.Minibatch:
  """One epoch's minibatches of a device's shard, stacked on a leading axis.

  'steps': the T x B transitions shuffled and cut into `num` parts, each a
  [1, T B / num] batch of single steps (feed-forward networks: no state
  crosses steps). 'unrolls': the B unrolls shuffled and cut into `num`
  parts of [T + 1, B / num] with their core states (recurrent networks).
  """
  t, b = targets.mask.shape
  if split == 'steps':
    n = t * b
    size = n // num
    idx = jax.random.permutation(key, n)[:num * size].reshape(num, size)
    flat = lambda x: x[:t].reshape((n,) + x.shape[2:])
    take = lambda x: flat(x)[idx][:, None]   # [num, 1, size, ...]
    return ppo.Minibatch(
        obs=jax.tree.map(take, batch.obs), first=jnp.ones((num, 1, size), bool),
        core_state=batch.core_state, action=take(batch.action), task_id=take(batch.task_id),
        targets=jax.tree.map(take, targets))
  if split == 'unrolls':
    size = b // num
    idx = jax.random.permutation(key, b)[:num * size].reshape(num, size)
    take = lambda x: jnp.moveaxis(x[:, idx], 1, 0)   # [T(+1), B, ...] -> [num, T(+1), size, ...]
    return ppo.Minibatch(
        obs=jax.tree.map(take, batch.obs), first=take(batch.first),
        core_state=jax.tree.map(lambda x: x[idx], batch.core_state),
        action=take(batch.action), task_id=take(batch.task_id),
        targets=jax.tree.map(take, targets))
  raise ValueError(f'unknown ppo.split {split!r}; choose one of {", ".join(losses.PPO_SPLITS)}')


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
