"""The step bookkeeping of a batch of envs, shared by the actors and evaluation.

Envs auto-reset (envs/base.py): the step after an episode's end is a reset step (action ignored,
reward 0, not counted). The policy's observation adds `prev_action` and `prev_reward` (0 at an
episode's first step; IMPALA's core reads them) and `task_id` (for a centring torso).
"""

import dataclasses
from typing import Dict, List, Optional, Tuple

import numpy as np

from networks.agent import CORE_EXTRA_INPUTS

# What the bookkeeping adds to the env's observation.
POLICY_INPUT_KEYS = {**{k: (shape, np.dtype(dtype)) for k, (shape, dtype) in CORE_EXTRA_INPUTS.items()},
                     'task_id': ((), np.dtype(np.int32))}


def host_dtype(dtype) -> np.dtype:
  """The dtype unrolls store: int32 for int64, float32 for float64 (no 64-bit JAX), else `dtype`."""
  dtype = np.dtype(dtype)
  return {np.dtype(np.int64): np.dtype(np.int32),
          np.dtype(np.float64): np.dtype(np.float32)}.get(dtype, dtype)


def policy_observation_spec(env_spec):
  return {**env_spec, **POLICY_INPUT_KEYS}


def example_observation(env_spec) -> Dict[str, np.ndarray]:
  """Zeros of one observation as the policy sees it, without batch axes (network init)."""
  return {k: np.zeros(s, host_dtype(d))
          for k, (s, d) in policy_observation_spec(env_spec).items()}


@dataclasses.dataclass(frozen=True)
class Episode:
  """One whole game that ended."""
  task_id: int
  episode_return: float    # sum of the env's rewards (as the env gives them, unclipped)
  episode_length: int      # agent steps, reset steps excluded
  stats: Optional[Dict[str, float]] = None  # the env's end-of-game stats (NetHack: score, ...)
  points: int = 0          # steps with a non-zero reward (Atari: points scored or lost)
  abs_reward: float = 0.0  # sum of the rewards' magnitudes; / points: the reward scale


class StepBookkeeping:
  """Per env: episode starts and ends, the previous action and reward, and the
  running return and length of the game in progress. Holds no lock.

  `prev_reward_scale` multiplies the reward the policy sees as `prev_reward`: 1 for training envs
  (already scaled), the task's reward scale for evaluation envs (raw scores).
  """

  def __init__(self, num_envs: int, prev_reward_scale: float = 1.0):
    n = num_envs
    self.first = np.ones(n, bool)       # this observation starts an episode
    self.terminal = np.zeros(n, bool)   # this observation ends one: the next step resets
    self._prev_action = np.zeros(n, np.int32)
    self._prev_reward = np.zeros(n, np.float32)
    self._return = np.zeros(n, np.float64)
    self._length = np.zeros(n, np.int64)
    self._points = np.zeros(n, np.int64)
    self._abs_reward = np.zeros(n, np.float64)
    self._scale = np.float32(prev_reward_scale)

  def policy_inputs(self, task_id) -> Dict[str, np.ndarray]:
    """POLICY_INPUT_KEYS of the current observation ([B] each), `task_id` as its step gave it."""
    return {'prev_action': np.where(self.first, 0, self._prev_action).astype(np.int32, copy=False),
            'prev_reward': np.where(self.first, 0.0, self._prev_reward).astype(np.float32, copy=False),
            'task_id': np.asarray(task_id, np.int32)}

  def record(self, action, result) -> List[Tuple[int, Episode]]:
    """Takes the step `action` [B] -> `result` (the env's StepResult) into the bookkeeping.

    Returns:
      (env index, Episode) for each whole game that ended on this step; an
      Atari life lost ends the learner's episode but not the game.
    """
    live = ~self.terminal  # not a reset step
    self._return += np.where(live, result.reward, 0.0)
    self._length += live
    scored = live & (result.reward != 0)
    self._points += scored
    self._abs_reward += np.where(scored, np.abs(result.reward), 0.0)
    stats = getattr(result, 'episode_stats', None)
    ended = [(int(i), Episode(
        int(result.task_id[i]), float(self._return[i]), int(self._length[i]),
        None if stats is None else {k: float(v[i]) for k, v in stats.items()},
        int(self._points[i]), float(self._abs_reward[i])))
        for i in np.flatnonzero(result.game_ended & live)]
    self._return[result.game_ended] = 0.0
    self._length[result.game_ended] = 0
    self._points[result.game_ended] = 0
    self._abs_reward[result.game_ended] = 0.0
    self._prev_action = np.array(action, np.int32)
    self._prev_reward = result.reward * self._scale
    self.first, self.terminal = self.terminal, result.terminated | result.truncated
    return ended
