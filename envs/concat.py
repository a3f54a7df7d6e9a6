"""Several batched envs (e.g. one pool per task) stepped as one batch."""

from typing import Sequence

import numpy as np

from envs.base import StepResult


class ConcatEnv:
  """Concatenates sub-envs along the env axis; they must share observation specs.

  Sub-envs with `step_async` / `step_wait` are all started before any is waited on, so their threads
  or processes overlap. An episode statistic some parts lack is NaN for their envs; `game_over` is a
  part's `terminated` where it has none.

  Raises:
    ValueError: when the sub-envs differ in observation spec or action count.
  """

  def __init__(self, envs: Sequence):
    specs = [e.observation_spec for e in envs]
    if any(s != specs[0] for s in specs):
      raise ValueError(f'tasks in one run need the same observation spec, got {specs}')
    actions = {e.num_actions for e in envs}
    if len(actions) != 1:
      raise ValueError(f'tasks in one run need the same action count, got {sorted(actions)}')
    self._envs = list(envs)
    self.num_envs = sum(e.num_envs for e in envs)
    self.num_actions = actions.pop()
    self.observation_spec = specs[0]
    self._splits = np.cumsum([e.num_envs for e in envs])[:-1]

  @property
  def envs(self):
    """The sub-envs, in env-axis order."""
    return tuple(self._envs)

  @property
  def restarts(self) -> int:
    """Worker processes replaced so far (NLE); EnvPool parts never restart."""
    return sum(getattr(e, 'restarts', 0) for e in self._envs)

  @staticmethod
  def _concat(results: Sequence[StepResult]) -> StepResult:
    if len(results) == 1:
      return results[0]
    stats = None
    keys = sorted({k for r in results for k in (r.episode_stats or {})})
    if keys:  # parts without a statistic report NaN for it
      stats = {k: np.concatenate([
          (r.episode_stats or {}).get(k, np.full(len(r.reward), np.nan, np.float32))
          for r in results]) for k in keys}
    return StepResult(
        obs={k: np.concatenate([r.obs[k] for r in results]) for k in results[0].obs},
        reward=np.concatenate([r.reward for r in results]),
        terminated=np.concatenate([r.terminated for r in results]),
        truncated=np.concatenate([r.truncated for r in results]),
        task_id=np.concatenate([r.task_id for r in results]),
        game_over=(None if all(r.game_over is None for r in results) else
                   np.concatenate([r.terminated if r.game_over is None else r.game_over
                                   for r in results])),
        episode_stats=stats)

  def reset(self) -> StepResult:
    return self._concat([e.reset() for e in self._envs])

  def step(self, actions: np.ndarray) -> StepResult:
    """Steps every sub-env, int [num_envs] actions split among them in order."""
    parts = np.split(np.asarray(actions), self._splits)
    if all(hasattr(e, 'step_async') for e in self._envs):
      for env, a in zip(self._envs, parts):
        env.step_async(a)
      return self._concat([e.step_wait() for e in self._envs])
    return self._concat([e.step(a) for e, a in zip(self._envs, parts)])

  def close(self) -> None:
    for e in self._envs:
      e.close()
