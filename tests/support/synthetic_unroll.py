"""A random unroll for learner tests: seeded, time-major [T + 1, B], with a
chosen task per batch column and per-task reward scales."""

import jax
import numpy as np

from rl.types import Unroll


def random_unroll(network, task_of_column, seed=0, length=5, num_actions=3,
                  reward_scales=(1.0, 100.0)) -> Unroll:
  """Observations {'state': [T + 1, B, 4]}; column b plays task_of_column[b]
  and its rewards are scaled by that task's entry of reward_scales."""
  task_of_column = np.asarray(task_of_column, np.int32)
  t1, b = length + 1, task_of_column.size
  rng = np.random.default_rng(seed)
  first = rng.random((t1, b)) < 0.2
  first[0] = True
  core = jax.tree.map(lambda x: np.asarray(rng.normal(size=x.shape), np.float32),
                      network.initial_state(b))
  task = np.tile(task_of_column, (t1, 1))
  return Unroll(
      obs={'state': rng.normal(size=(t1, b, 4)).astype(np.float32)},
      first=first,
      action=rng.integers(0, num_actions, (t1, b)).astype(np.int32),
      behaviour_logits=rng.normal(size=(t1, b, num_actions)).astype(np.float32),
      reward=(rng.normal(size=(t1, b)) * np.asarray(reward_scales)[task]).astype(np.float32),
      discount=(rng.random((t1, b)) > 0.1).astype(np.float32),
      task_id=task, core_state=core)
