"""A learner batch puts its actor blocks in actor order, whichever arrived first."""

import types

import numpy as np

from agents.actor import UnrollBlock
from agents.trainer import Trainer
from rl.types import Unroll


def _block(actor_id, version, value):
  x = np.full((3, 2), value, np.float32)
  unroll = Unroll(obs={'state': x[..., None]}, first=x > 0, action=x.astype(np.int32),
                  behaviour_logits=x[..., None], reward=x, discount=x,
                  task_id=x.astype(np.int32), core_state=())
  return UnrollBlock(unroll, version, actor_id)


def test_blocks_are_joined_in_actor_order_whatever_arrived_first():
  arrivals = [_block(1, 7, 1.0), _block(0, 8, 0.0), _block(1, 6, 2.0)]
  fake = types.SimpleNamespace(plan=types.SimpleNamespace(blocks_per_batch=3, num_tasks=3), version=9)
  fake._next_block = lambda: arrivals.pop(0)
  batch, lags = Trainer.next_batch(fake)
  # Actor 0's block, then actor 1's oldest (version 6) and newer (version 7).
  np.testing.assert_array_equal(batch.reward[0], [0, 0, 2, 2, 1, 1])
  assert lags == [1, 3, 2]
