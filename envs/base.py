"""The one batched-environment interface every adapter in `envs/` implements.

All adapters follow EnvPool's auto-reset convention, so the actor and the
learner handle every environment the same way:

* `step` returns the observation reached, the reward for the action, and
  `terminated` / `truncated` flags for that transition.
* The step *after* an env reported `terminated or truncated` ignores its action,
  resets that env and returns the first observation of the new episode with
  reward 0 and both flags False (a "reset step"). The learner masks reset steps
  out of the losses; at truncation the terminal observation's value is the
  bootstrap, at termination the discount is 0.
"""

import dataclasses
from typing import Dict, Protocol

import numpy as np


@dataclasses.dataclass
class StepResult:
  """What a batched `reset` or `step` returns; arrays have a leading env axis [B]."""
  obs: Dict[str, np.ndarray]   # observation dict, each array [B, ...]
  reward: np.ndarray           # float32 [B], after the task's reward scale
  terminated: np.ndarray       # bool [B]: episode ended, do not bootstrap
  truncated: np.ndarray        # bool [B]: episode cut (time limit), bootstrap
  task_id: np.ndarray          # int32 [B]: task index of each env


class BatchedEnv(Protocol):
  """A batch of environments stepped together."""

  num_envs: int
  num_actions: int
  observation_spec: Dict[str, tuple]  # key -> (shape without batch, dtype)

  def reset(self) -> StepResult:
    ...

  def step(self, actions: np.ndarray) -> StepResult:
    ...

  def close(self) -> None:
    ...
