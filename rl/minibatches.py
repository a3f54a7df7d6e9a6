"""How a learner update deals a device's shard of whole unrolls into minibatches,
shuffled by the run's seed and the learner step alone (so they can be named again later)."""

import jax
import jax.numpy as jnp

from rl.types import Unroll


def shuffle_keys(seed: int, step, epochs: int):
  """One shuffle key per epoch of the update, a function of seed and step only."""
  return jax.random.split(jax.random.fold_in(jax.random.key(seed), step), epochs)


def unroll_order(key, num_unrolls: int, num: int, unroll_tasks=None, shift=0):
  """Which unrolls each of `num` minibatches holds: [num, B // num] indices.

  The unrolls are permuted with `key` and cut in order (the remainder of B / num dropped). With
  `unroll_tasks` [B] the permuted unrolls are grouped by task (stable sort) and dealt out in turn,
  so each minibatch gets floor or ceil of c / num of a task's c unrolls; the minibatches are then
  shuffled (so no one always takes a task's extra unroll) and rotated by `shift`, the learner
  device's index, so the devices' extra unrolls land in different global minibatches. B must then be
  a multiple of `num`.
  """
  size = num_unrolls // num
  deal_key, key = jax.random.split(key) if unroll_tasks is not None else (None, key)
  perm = jax.random.permutation(key, num_unrolls)
  if unroll_tasks is None:
    return perm[:num * size].reshape(num, size)
  if num_unrolls % num:
    raise ValueError(f'{num_unrolls} unrolls do not deal evenly into {num} minibatches')
  grouped = perm[jnp.argsort(jnp.asarray(unroll_tasks)[perm], stable=True)]
  rows = grouped.reshape(size, num).T[jax.random.permutation(deal_key, num)]
  return jnp.roll(rows, shift, axis=0)


def split_unrolls(batch: Unroll, num: int, key, balance_tasks: bool = False,
                  shift=0) -> Unroll:
  """A device's shard as shuffled minibatches of whole unrolls (`unroll_order`).

  Args:
    batch: fields [T + 1, B, ...], core state [B, ...].
    balance_tasks: deal each task's unrolls (batch.task_id[0]) out evenly.
    shift: with `balance_tasks`, the learner device's index.

  Returns:
    An Unroll with fields [num, T + 1, B / num, ...], core state [num, B / num, ...].
  """
  idx = unroll_order(key, batch.action.shape[1], num,
                     batch.task_id[0] if balance_tasks else None, shift)
  take = lambda x: jnp.moveaxis(x[:, idx], 1, 0)   # [T+1, B, ...] -> [num, T+1, size, ...]
  return Unroll(obs=jax.tree.map(take, batch.obs), first=take(batch.first),
                action=take(batch.action), behaviour_logits=take(batch.behaviour_logits),
                reward=take(batch.reward), discount=take(batch.discount),
                task_id=take(batch.task_id),
                core_state=jax.tree.map(lambda x: x[idx], batch.core_state))
