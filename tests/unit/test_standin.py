"""agents/standin.py: the stand-in env keeps envs/base.py's auto-reset
convention, and the real actor loop runs on it with the stand-in policy
(analysis/benchmark.py --stages=loop)."""

import numpy as np
import pytest

from agents import standin
from agents.rollout import StepBookkeeping
from configs import atari_popart
from configs.validation import validate_spec
from analysis import benchmark

SPEC = {'frames': ((4, 84, 84), np.uint8)}


def test_episodes_end_staggered_then_reset_with_zero_reward():
  env = standin.StandInEnv(num_envs=3, num_actions=6, observation_spec=SPEC,
                           num_tasks=3, episode_length=3)
  first = env.reset()
  assert first.obs['frames'].shape == (3, 4, 84, 84) and first.obs['frames'].dtype == np.uint8
  assert first.task_id.tolist() == [0, 1, 2]
  terminated, rewards = [], []
  for _ in range(8):
    r = env.step(np.zeros(3, np.int32))
    terminated.append(r.terminated.tolist())
    rewards.append(r.reward.tolist())
    assert not r.truncated.any()
  # Env i starts i steps into its first episode of 3: env 2 ends on step 1,
  # env 1 on step 2, env 0 on step 3; the step after each end is a reset
  # step (reward 0, no flags), then 3 more steps to the next end.
  assert [t[2] for t in terminated] == [True, False, False, False, True, False, False, False]
  assert [t[1] for t in terminated] == [False, True, False, False, False, True, False, False]
  assert [t[0] for t in terminated] == [False, False, True, False, False, False, True, False]
  assert [r[2] for r in rewards] == [1, 0, 1, 1, 1, 0, 1, 1]


def test_bookkeeping_counts_whole_episodes_of_the_stand_in():
  env = standin.StandInEnv(num_envs=2, num_actions=4, observation_spec=SPEC, episode_length=5)
  book, ended = StepBookkeeping(2), []
  env.reset()
  for _ in range(25):
    action = np.ones(2, np.int32)
    ended += book.record(action, env.step(action))
  # Env 0: episodes of 5 steps, each followed by a reset step (6 steps a game).
  lengths = [e.episode_length for i, e in ended if i == 0]
  assert lengths == [5, 5, 5, 5] and all(e.episode_return == 5 for i, e in ended if i == 0)


def test_stand_in_rejects_bad_sizes_and_actions():
  with pytest.raises(ValueError):
    standin.StandInEnv(0, 4, SPEC)
  env = standin.StandInEnv(2, 4, SPEC)
  env.reset()
  with pytest.raises(ValueError, match='shape'):
    env.step(np.zeros(3, np.int32))


def test_standin_policy_returns_fixed_numpy_arrays():
  act = standin.standin_act_fn(num_envs=5, num_actions=18)
  action, logits, state, rng = act(None, {}, np.ones(5, bool), (), 'rng')
  assert action.shape == (5,) and logits.shape == (5, 18) and state == () and rng == 'rng'


def test_loop_stage_times_the_real_actor_loop():
  config = atari_popart.get_config('games=Pong+Carnival,smoke')
  us, sps = benchmark.bench_loop(validate_spec(config), seconds=0.5, warmup=0.2)
  assert sps > 0 and us == pytest.approx(1e6 / sps)
