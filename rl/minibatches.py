"""How a learner update deals a device's shard of unrolls into minibatches.

Whole unrolls are shuffled with a key drawn from the run's seed and the
learner step (the same on every device, so `launch/diagnose_update.py` and
`analysis/` can name the unrolls each minibatch held), and cut into
minibatches; with `balance_tasks` each task's unrolls are dealt out evenly, so
every minibatch holds floor or ceil of c / M of a task's c unrolls.
"""

import jax
import jax.numpy as jnp

from rl.types import Unroll


def shuffle_keys(seed: int, step, epochs: int):
  """The keys of one update's minibatch shuffles, one per epoch: the same on
  every device, and a function of the run's seed and the learner step."""
  return jax.random.split(jax.random.fold_in(jax.random.key(seed), step), epochs)


def unroll_order(key, num_unrolls: int, num: int, unroll_tasks=None, shift=0):
  """Which unrolls each of `num` minibatches holds.

  The unrolls are permuted with `key`. Without `unroll_tasks` the permutation
  is cut in order into `num` parts. With them (`balance_tasks`) the permuted
  unrolls are grouped by task (a stable sort keeps the random order within a
  task) and dealt out in turn, minibatch 0, 1, ..., num - 1, 0, ...: each
  task's unrolls are consecutive, so every minibatch gets floor(c / num) or
  ceil(c / num) of a task's c unrolls. The minibatches are then put in an
  order drawn from `key` (so no minibatch always takes a task's extra
  unroll) and rotated by `shift`: learner device d passes d, so that where
  the devices' shards hold the same tasks their extra unrolls land in
  different global minibatches.

  Args:
    key: a PRNG key.
    num_unrolls: B, the unrolls of the shard; with `unroll_tasks` a
      multiple of `num` (`batch_split` makes it one).
    num: the number of minibatches.
    unroll_tasks: None, or int [B], each unroll's task.
    shift: with `unroll_tasks`, an int (traced or not) the minibatches are
      rotated by.

  Returns:
    [num, B // num] unroll indices (without `unroll_tasks` the remainder of
    B / num is dropped).
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
  """A device's shard as shuffled minibatches of whole unrolls.

  The unrolls are permuted with `key` and cut into `num` parts of B // num
  (`unroll_order`; with `balance_tasks` each task's unrolls dealt out
  evenly); the B mod num left over are dropped (`batch_split` rejects such
  settings).

  Args:
    batch: the shard, fields [T + 1, B, ...], core state [B, ...].
    num: the number of minibatches.
    key: a PRNG key for the shuffle.
    balance_tasks: deal each task's unrolls (by batch.task_id's first row)
      out evenly over the minibatches.
    shift: with `balance_tasks`, the rotation of the minibatches
      (`unroll_order`): the learner device's index.

  Returns:
    An Unroll stacked on a leading axis: fields [num, T + 1, B / num, ...],
    core state [num, B / num, ...].
  """
  idx = unroll_order(key, batch.action.shape[1], num,
                     batch.task_id[0] if balance_tasks else None, shift)
  take = lambda x: jnp.moveaxis(x[:, idx], 1, 0)   # [T+1, B, ...] -> [num, T+1, size, ...]
  return Unroll(obs=jax.tree.map(take, batch.obs), first=take(batch.first),
                action=take(batch.action), behaviour_logits=take(batch.behaviour_logits),
                reward=take(batch.reward), discount=take(batch.discount),
                task_id=take(batch.task_id),
                core_state=jax.tree.map(lambda x: x[idx], batch.core_state))
