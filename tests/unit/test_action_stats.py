"""Per-task action frequencies, entropy and collapse detection."""

import numpy as np
import pytest

from agents.action_stats import ActionStats


def _batch(task_ids, actions, logits):
  # [T + 1, B]: the last step repeats in the next unroll and is skipped.
  pad = lambda x: np.concatenate([x, x[-1:]])  # noqa: E731
  return pad(np.asarray(task_ids)), pad(np.asarray(actions)), pad(np.asarray(logits, float))


def test_frequencies_entropy_and_collapse_per_task():
  stats = ActionStats(num_tasks=2, num_actions=3)
  # Task 0: actions 0,0,0,... (10 of 10 -> collapse); task 1: 1,2 alternating.
  task = np.array([[0, 1]] * 10)
  action = np.stack([np.zeros(10, int), np.arange(10) % 2 + 1], axis=1)
  logits = np.zeros((10, 2, 3))
  logits[:, 0] = [10.0, 0.0, 0.0]  # nearly deterministic
  stats.add(*_batch(task, action, logits))
  out, warnings = stats.summary(('a', 'b'), ('noop', 'left', 'right'))
  assert out['actions/a/noop'] == 1.0 and out['actions/a/left'] == 0.0
  assert out['actions/b/left'] == 0.5 and out['actions/b/right'] == 0.5
  assert out['collapse/a'] == 1.0 and out['collapse/b'] == 0.0
  assert out['entropy/b'] == pytest.approx(np.log(3))
  p = np.exp([10.0, 0, 0]) / np.exp([10.0, 0, 0]).sum()
  assert out['entropy/a'] == pytest.approx(-(p * np.log(p)).sum())
  assert len(warnings) == 1 and "'noop' took 100.0%" in warnings[0]
  # The window resets after a summary.
  assert stats.summary(('a', 'b'), ('noop', 'left', 'right')) == ({}, [])


def test_ninety_percent_is_not_yet_collapse():
  stats = ActionStats(num_tasks=1, num_actions=2)
  action = np.array([[0]] * 9 + [[1]])
  stats.add(*_batch(np.zeros((10, 1), int), action, np.zeros((10, 1, 2))))
  out, warnings = stats.summary(('t',), ('x', 'y'))
  assert out['actions/t/x'] == pytest.approx(0.9) and out['collapse/t'] == 0.0 and not warnings
