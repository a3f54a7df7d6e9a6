"""analysis/advantage_groups.py against values worked out by hand, and the
learner's minibatches as rl/minibatches.unroll_order names them."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis import advantage_groups as ag
from rl import minibatches
from rl.types import Unroll

R2 = np.sqrt(2.0)


def _batch(raw, unroll_task, minibatches, reward=None, mask=None):
  raw = np.asarray(raw, float)
  return ag.AdvantageBatch(
      raw=raw, mask=np.ones_like(raw) if mask is None else np.asarray(mask, float),
      reward=np.zeros_like(raw) if reward is None else np.asarray(reward, float),
      unroll_task=np.asarray(unroll_task), minibatches=np.asarray(minibatches))


def test_normalisations_use_only_the_valid_entries():
  # One unroll, one minibatch: mean 2, std sqrt(2/3) over 1, 2, 3; the masked 100 comes out 0.
  b = _batch([[1.0], [2.0], [3.0], [100.0]], [0], [[0]], mask=[[1.0], [1.0], [1.0], [0.0]])
  for out in ag.normalizations(b, 1).values():
    np.testing.assert_allclose(out[:, 0], [-np.sqrt(1.5), 0.0, np.sqrt(1.5), 0.0], rtol=1e-6)


def test_variance_split_between_and_within_unrolls():
  # Columns are unrolls. [0, 2] and [2, 4]: unroll means 1 and 3 about 2:
  # between 2 * 1 + 2 * 1 = 4; within (1 + 1) + (1 + 1) = 4.
  assert ag.variance_split(np.array([[0.0, 2.0], [2.0, 4.0]]), np.ones((2, 2))) == (4.0, 4.0)
  # Equal unroll means: all of it within.
  assert ag.variance_split(np.array([[0.0, 2.0], [2.0, 0.0]]), np.ones((2, 2))) == (0.0, 4.0)


def test_one_unroll_per_minibatch_loses_the_unrolls_own_mean():
  # One task, unrolls [0, 2] and [2, 4], each alone in its minibatch.
  b = _batch([[0.0, 2.0], [2.0, 4.0]], [0, 0], [[0], [1]], reward=[[0.0, 1.0], [0.0, 0.0]])
  norms = ag.normalizations(b, 1)
  # Over the batch: mean 2, std sqrt(2).
  np.testing.assert_allclose(norms['batch'], [[-R2, 0.0], [0.0, R2]], atol=1e-6)
  # Each unroll on its own: [-1, 1], whatever its level.
  np.testing.assert_allclose(norms['task'], [[-1.0, -1.0], [1.0, 1.0]], atol=1e-6)
  np.testing.assert_allclose(norms['minibatch'], norms['task'])
  result = ag.report([b], 1, ['pong'])
  t = result['tasks']['pong']
  assert t['steps'] == 4 and t['between_share'] == pytest.approx(0.5)
  assert t['raw_std'] == pytest.approx(R2)   # 0, 2, 2, 4 about 2
  # corr([-1, 1, -1, 1], [-r2, 0, 0, r2]) = 2 r2 / (2 * 2) = 1 / sqrt(2).
  assert t['corr_task'] == pytest.approx(1 / R2, rel=1e-6)
  assert t['corr_minibatch'] == pytest.approx(1 / R2, rel=1e-6)
  # The unroll that scored (the second): mean r2 / 2 over the batch, 0 alone.
  assert t['credit']['r>0']['unrolls'] == 1
  assert t['credit']['r>0']['batch'] == pytest.approx(R2 / 2, rel=1e-6)
  assert t['credit']['r>0']['task'] == pytest.approx(0.0, abs=1e-6)
  assert t['credit']['r=0']['batch'] == pytest.approx(-R2 / 2, rel=1e-6)
  assert t['credit']['r<0']['unrolls'] == 0
  # Two minibatches x one task: each holds one unroll of it.
  assert result['unrolls_per_minibatch'] == [0, 2]


def test_two_unrolls_of_a_task_in_one_minibatch_keep_their_difference():
  # The same two unrolls together: per task per minibatch = over the batch.
  b = _batch([[0.0, 2.0], [2.0, 4.0]], [0, 0], [[0, 1]])
  norms = ag.normalizations(b, 1)
  np.testing.assert_allclose(norms['task'], norms['batch'])
  assert ag.report([b], 1)['tasks']['0']['corr_task'] == pytest.approx(1.0)


def test_pooled_minibatch_mixes_the_tasks_and_per_task_does_not():
  # Task 0's unroll [0, 2] and task 1's [10, 12] in one minibatch.
  b = _batch([[0.0, 10.0], [2.0, 12.0]], [0, 1], [[0, 1]])
  norms = ag.normalizations(b, 2)
  np.testing.assert_allclose(norms['task'], [[-1.0, -1.0], [1.0, 1.0]], atol=1e-6)
  # Pooled: mean 6, std sqrt(26): task 0 all below, task 1 all above.
  s = np.sqrt(26.0)
  np.testing.assert_allclose(norms['minibatch'], [[-6 / s, 4 / s], [-4 / s, 6 / s]], rtol=1e-6)
  assert ag.report([b], 2)['unrolls_per_minibatch'] == [0, 2, 0]


def test_the_report_reads_as_text():
  b = _batch([[0.0, 2.0], [2.0, 4.0]], [0, 0], [[0], [1]], reward=[[0.0, 1.0], [0.0, 0.0]])
  lines = ag.format_report(ag.report([b], 1, ['Pong']))
  assert lines[1].startswith('Pong') and '0.707' in lines[1]
  assert lines[-1].startswith('unrolls of a task per minibatch: 0: 0 (0.0%), 1: 2 (100.0%)')


def test_unroll_order_names_the_unrolls_split_unrolls_takes():
  t, b, num = 3, 12, 4
  column = jnp.broadcast_to(jnp.arange(b), (t + 1, b))
  batch = Unroll(obs={'x': jnp.zeros((t + 1, b, 1))}, first=jnp.zeros((t + 1, b), bool),
                 action=column, behaviour_logits=jnp.zeros((t + 1, b, 2)),
                 reward=jnp.zeros((t + 1, b)), discount=jnp.ones((t + 1, b)),
                 task_id=column, core_state=jnp.zeros((b, 1)))
  key = minibatches.shuffle_keys(seed=3, step=7, epochs=2)[1]
  order = np.asarray(minibatches.unroll_order(key, b, num))
  parts = minibatches.split_unrolls(batch, num, key)
  np.testing.assert_array_equal(np.asarray(parts.task_id)[:, 0], order)
  assert sorted(order.ravel().tolist()) == list(range(b))
  # Another step shuffles differently.
  other = np.asarray(minibatches.unroll_order(minibatches.shuffle_keys(3, 8, 2)[1], b, num))
  assert not np.array_equal(order, other)
