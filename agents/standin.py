"""Stand-ins for a batched env and the policy, to time the actor loop alone (launch/benchmark.py
--stages=loop): `StandInEnv` has a real env's spaces and auto-reset but steps in no time, and
`standin_act_fn` returns fixed numpy arrays without touching a device."""

from typing import Dict, Tuple

import numpy as np

from agents.rollout import host_dtype
from envs.base import StepResult


class StandInEnv:
  """A BatchedEnv with the given spaces whose steps cost nothing.

  Envs are split evenly over tasks in order; each ends an episode every
  `episode_length` steps, env i's first one shorter by i % episode_length, so
  some env ends one on most steps. ValueError on a count below 1.
  """

  def __init__(self, num_envs: int, num_actions: int, observation_spec: Dict[str, Tuple],
               num_tasks: int = 1, episode_length: int = 100):
    if num_envs < 1 or num_actions < 1 or episode_length < 1 or num_tasks < 1:
      raise ValueError('num_envs, num_actions, num_tasks and episode_length must be >= 1')
    self.num_envs, self.num_actions = num_envs, num_actions
    self.observation_spec = dict(observation_spec)
    self._obs = {k: np.zeros((num_envs,) + tuple(s), host_dtype(d))
                 for k, (s, d) in self.observation_spec.items()}
    self._task_id = (np.arange(num_envs) * num_tasks // num_envs).astype(np.int32)
    self._length = episode_length
    self._clock = np.arange(num_envs) % episode_length
    self._reward = np.ones(num_envs, np.float32)
    self._pending_reset = np.zeros(num_envs, bool)

  def _result(self, reward, terminated) -> StepResult:
    return StepResult(obs=self._obs, reward=reward, terminated=terminated,
                      truncated=np.zeros(self.num_envs, bool), task_id=self._task_id)

  def reset(self) -> StepResult:
    """The first observations: zeros, reward 0, nothing terminated."""
    self._pending_reset[:] = False
    return self._result(np.zeros(self.num_envs, np.float32), np.zeros(self.num_envs, bool))

  def step(self, actions) -> StepResult:
    """One step of every env, `actions` [B]: reward 1, or 0 on a reset step."""
    if np.shape(actions) != (self.num_envs,):
      raise ValueError(f'actions must have shape ({self.num_envs},), got {np.shape(actions)}')
    resetting = self._pending_reset
    self._clock = np.where(resetting, 0, self._clock + 1)
    terminated = ~resetting & (self._clock >= self._length)
    reward = np.where(resetting, 0.0, self._reward).astype(np.float32)
    self._pending_reset = terminated
    return self._result(reward, terminated)

  def close(self) -> None:
    pass


def standin_act_fn(num_envs: int, num_actions: int):
  """An act like actor.make_act_fn's that does no device work: action int32
  zeros [B], logits zeros [B, A], the same arrays on every call."""
  action = np.zeros(num_envs, np.int32)
  logits = np.zeros((num_envs, num_actions), np.float32)

  def act(variables, obs, first, core_state, rng):
    del variables, obs, first
    return action, logits, core_state, rng

  return act
