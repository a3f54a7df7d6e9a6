"""Actor bookkeeping on a scripted env: overlapping unrolls, first flags,
reset steps, discounts and whole-episode returns."""

import queue
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

from agents.actor import Actor, ParamsStore
from agents.timing import StageTimer
from envs.base import StepResult


class CountingEnv:
  """obs = steps into the episode; reward 1 per step; episodes of `length`
  steps end by termination (env 0) or truncation (env 1); EnvPool's
  auto-reset convention."""
  num_envs, num_actions = 2, 3
  observation_spec = {'state': ((1,), np.float32)}

  def __init__(self, length=3):
    self.length = length
    self.count = np.zeros(2, int)
    self.done = np.zeros(2, bool)

  def _result(self, reward, term, trunc):
    return StepResult(obs={'state': self.count[:, None].astype(np.float32)},
                      reward=reward.astype(np.float32), terminated=term, truncated=trunc,
                      task_id=np.array([0, 1], np.int32))

  def reset(self):
    self.count[:] = 0
    return self._result(np.zeros(2), np.zeros(2, bool), np.zeros(2, bool))

  def step(self, actions):
    reward = np.where(self.done, 0.0, 1.0)
    self.count = np.where(self.done, 0, self.count + 1)
    ended = (self.count == self.length) & ~self.done
    term = ended & np.array([True, False])
    trunc = ended & np.array([False, True])
    self.done = ended
    return self._result(reward, term, trunc)

  def close(self):
    pass


class LivesEnv(CountingEnv):
  """Like CountingEnv (env 0 only terminates) but a game has two lives: each
  life ends in `terminated`, and only the second also sets `game_over`, as
  EnvPool Atari does with end-of-life episodes."""

  def __init__(self, length=3):
    super().__init__(length)
    self.lives = np.full(2, 2)

  def step(self, actions):
    reset = self.done.copy()
    self.lives = np.where(reset & (self.lives == 0), 2, self.lives)
    reward = np.where(self.done, 0.0, 1.0)
    self.count = np.where(self.done, 0, self.count + 1)
    ended = (self.count == self.length) & ~self.done
    self.lives = self.lives - ended
    self.done = ended
    result = self._result(reward, ended, np.zeros(2, bool))
    result.game_over = ended & (self.lives == 0)
    return result


def _act(variables, obs, first, state, rng):
  n = obs['state'].shape[0]
  return jnp.full(n, 2, jnp.int32), jnp.zeros((n, 3)), state, rng


def _collect(num_blocks, unroll_length=4, env=None):
  store, unrolls, episodes = ParamsStore(), queue.Queue(), queue.SimpleQueue()
  store.publish({}, 7)
  stop = threading.Event()
  actor = Actor(0, env or CountingEnv(), _act, (), store, unrolls, episodes, StageTimer(), stop,
                unroll_length, jax.devices()[0], seed=0)
  actor.start()
  blocks = [unrolls.get(timeout=30) for _ in range(num_blocks)]
  stop.set()
  actor.join(timeout=10)
  assert actor.error is None, actor.error
  eps = []
  while not episodes.empty():
    eps.append(episodes.get())
  return blocks, eps


def test_unrolls_overlap_by_one_step_and_mark_episode_starts():
  blocks, _ = _collect(3)
  u0, u1 = blocks[0].unroll, blocks[1].unroll
  assert u0.obs['state'].shape == (5, 2, 1)
  assert blocks[0].params_version == 7
  # The last step of one unroll is the first step of the next.
  np.testing.assert_array_equal(u0.obs['state'][-1], u1.obs['state'][0])
  np.testing.assert_array_equal(u0.first[-1], u1.first[0])
  # Episode of 3 steps: obs 0,1,2,3(terminal), then the reset step returns 0 (first).
  obs = np.concatenate([u0.obs['state'][:, 0, 0], u1.obs['state'][1:, 0, 0]])
  first = np.concatenate([u0.first[:, 0], u1.first[1:, 0]])
  np.testing.assert_array_equal(obs, [0, 1, 2, 3, 0, 1, 2, 3, 0])
  np.testing.assert_array_equal(first, [1, 0, 0, 0, 1, 0, 0, 0, 1])


def test_discounts_and_rewards_follow_termination_and_truncation():
  blocks, _ = _collect(2)
  u0 = blocks[0].unroll
  # Env 0 terminates on the action at obs 2; env 1 is truncated there instead.
  np.testing.assert_array_equal(u0.discount[:, 0], [1, 1, 0, 1, 1])
  np.testing.assert_array_equal(u0.discount[:, 1], [1, 1, 1, 1, 1])
  # The reset step (from the terminal obs 3) gives no reward.
  np.testing.assert_array_equal(u0.reward[:, 0], [1, 1, 1, 0, 1])


def test_episode_returns_count_whole_episodes():
  _, eps = _collect(4)
  assert eps, 'no episode recorded'
  assert {e.task_id for e in eps} == {0, 1}
  assert all(e.episode_return == 3.0 and e.episode_length == 3 for e in eps)


def test_observations_carry_the_previous_action_and_reward_zeroed_at_episode_starts():
  blocks, _ = _collect(2)
  u0, u1 = blocks[0].unroll, blocks[1].unroll
  first = np.concatenate([u0.first[:, 0], u1.first[1:, 0]])
  prev_a = np.concatenate([u0.obs['prev_action'][:, 0], u1.obs['prev_action'][1:, 0]])
  prev_r = np.concatenate([u0.obs['prev_reward'][:, 0], u1.obs['prev_reward'][1:, 0]])
  assert u0.obs['prev_action'].dtype == np.int32 and u0.obs['prev_reward'].dtype == np.float32
  np.testing.assert_array_equal(first, [1, 0, 0, 0, 1, 0, 0, 0, 1])
  np.testing.assert_array_equal(prev_a, [0, 2, 2, 2, 0, 2, 2, 2, 0])
  np.testing.assert_array_equal(prev_r, [0, 1, 1, 1, 0, 1, 1, 1, 0])


def test_logged_returns_are_whole_games_summed_across_lives():
  blocks, eps = _collect(6, env=LivesEnv())
  # The learner sees one episode per life (discount 0 at every life lost) ...
  np.testing.assert_array_equal(blocks[0].unroll.discount[:, 0], [1, 1, 0, 1, 1])
  # ... while logged episodes are games of two 3-step lives.
  assert eps, 'no game recorded'
  assert all(e.episode_return == 6.0 and e.episode_length == 6 for e in eps)


def test_wait_for_learner_acts_with_params_published_after_the_block_was_taken():
  """With wait_for_learner, an actor that queued a block acts no further
  until the learner takes it; the next unroll then reads the newest params.
  Without it, the actor runs ahead with the old params."""
  for wait in (True, False):
    store, unrolls, episodes = ParamsStore(), queue.Queue(maxsize=1), queue.SimpleQueue()
    store.publish({}, 0)
    stop = threading.Event()
    env = CountingEnv(length=100)
    actor = Actor(0, env, _act, (), store, unrolls, episodes, StageTimer(), stop, 4,
                  jax.devices()[0], seed=0, wait_for_learner=wait)
    actor.start()
    first = unrolls.get(timeout=30)        # the learner takes block 0 ...
    # Block 0 takes 5 steps of 2 envs, each later block 4 (they share a step).
    stops_at = 2 * (5 + 4) if wait else 2 * (5 + 4 + 4)
    deadline = time.time() + 30            # (a loaded machine may be slow to get there)
    while actor.env_steps < stops_at and time.time() < deadline:
      time.sleep(0.01)
    time.sleep(0.3)                        # time to run past it, if it would
    steps_while_training = actor.env_steps
    store.publish({}, 1)                   # ... and publishes version 1 after its update
    second = unrolls.get(timeout=30)
    stop.set()
    actor.join(timeout=10)
    assert actor.error is None, actor.error
    assert first.params_version == 0
    if wait:
      # Block 1 was collected while the learner trained on block 0 (params 0),
      # then the actor stopped: one update of lag at most.
      assert second.params_version == 0 and steps_while_training == 2 * (5 + 4)
    else:
      assert steps_while_training == 2 * (5 + 4 + 4)   # it ran ahead into block 2
