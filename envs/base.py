"""The one batched-environment interface every adapter in `envs/` implements.

All adapters follow EnvPool's auto-reset convention: `step` returns the observation reached, the
reward and the `terminated` / `truncated` flags of that transition; the step *after* an env reported
either ignores its action, resets it and returns the new episode's first observation with reward 0
and both flags False (a "reset step", masked out of the losses). At truncation the terminal
observation's value is the bootstrap; at termination the discount is 0.
"""

import dataclasses
from typing import Dict, Optional, Protocol

import numpy as np


@dataclasses.dataclass
class StepResult:
  """What a batched `reset` or `step` returns; arrays have a leading env axis [B]."""
  obs: Dict[str, np.ndarray]   # observation dict, each array [B, ...]
  reward: np.ndarray           # float32 [B], after the task's reward scale
  terminated: np.ndarray       # bool [B]: episode ended, do not bootstrap
  truncated: np.ndarray        # bool [B]: episode cut (time limit), bootstrap
  task_id: np.ndarray          # int32 [B]: task index of each env
  # bool [B]: the whole game ended. Differs from `terminated` only for Atari
  # with end-of-life episodes (training), where a lost life terminates the
  # learner's episode but the game goes on; logged returns follow games.
  game_over: Optional[np.ndarray] = None
  # Per-env float arrays [B] for logging, valid where `game_ended` (the ended
  # game's final values); NLE: 'score', 'depth', 'turns'. None: the env has none.
  episode_stats: Optional[Dict[str, np.ndarray]] = None

  @property
  def game_ended(self) -> np.ndarray:
    """bool [B]: a whole game ended here (game over or truncation)."""
    over = self.terminated if self.game_over is None else self.game_over
    return over | self.truncated


class BatchedEnv(Protocol):
  """A batch of environments stepped together."""

  num_envs: int
  num_actions: int
  observation_spec: Dict[str, tuple]  # key -> (shape without batch, dtype)

  def reset(self) -> StepResult:
    """Starts a new episode in every env: first observations, reward 0, flags False."""
    ...

  def step(self, actions: np.ndarray) -> StepResult:
    """Steps every env once with int [B] actions (the module's auto-reset
    convention: ignored for envs that take a reset step)."""
    ...

  def close(self) -> None:
    """Releases the envs (threads, processes); the env is unusable after."""
    ...
