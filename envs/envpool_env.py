"""EnvPool adapter: one pool of identical envs of one task (classic control or Atari).

EnvPool steps its envs in its own C++ threads and releases the GIL, so an actor thread drives it
directly. Observations are {'state': ...} for vectors, {'frames': uint8 [4, 84, 84]} for Atari.
"""

import dataclasses
from typing import Any, Dict

import envpool
import numpy as np

from envs.base import StepResult
from infra.settings import at_least, setting


@dataclasses.dataclass(frozen=True)
class EnvPoolConfig:
  """EnvPool's batching (the config's `envpool` group); envs/families.py sizes it."""
  threads: int = setting(0, 'EnvPool threads per pool (a pool per task per actor); 0 = sized '
                         'to the machine (envs/families.py)', at_least(0))


def observation_key(shape) -> str:
  return 'frames' if len(shape) == 3 else 'state'


class EnvPoolEnv:
  """`num_envs` copies of one EnvPool env, all belonging to task `task_id`.

  A BatchedEnv (envs/base.py) over one gymnasium-style pool with batch_size
  = num_envs, so every step returns all envs, sorted by env id. `game_over`
  is EnvPool's info['terminated'] where the env reports one (Atari).

  Args:
    env_kwargs: envpool.make's kwargs (atari.protocol_kwargs for Atari).
    num_threads: EnvPool's worker threads (0: EnvPool's default).
    render: make the pool able to draw its screens (`render`).
  """

  def __init__(self, env_id: str, num_envs: int, task_id: int,
               env_kwargs: Dict[str, Any], reward_scale: float = 1.0,
               seed: int = 0, num_threads: int = 0, render: bool = False):
    extra = {'render_mode': 'rgb_array'} if render else {}
    self._pool = envpool.make(
        env_id, env_type='gymnasium', num_envs=num_envs, batch_size=num_envs,
        seed=seed, num_threads=num_threads, **env_kwargs, **extra)
    self._render = render
    space = self._pool.observation_space
    self._key = observation_key(space.shape)
    self.num_envs = num_envs
    self.num_actions = int(self._pool.action_space.n)
    self.observation_spec = {self._key: (tuple(space.shape), np.dtype(space.dtype))}
    self._reward_scale = np.float32(reward_scale)
    self._task_ids = np.full((num_envs,), task_id, np.int32)
    self._all_ids = np.arange(num_envs, dtype=np.int32)

  def _result(self, obs, reward, terminated, truncated, info) -> StepResult:
    env_id = info['env_id']
    game_over = info.get('terminated')
    if not np.array_equal(env_id, self._all_ids):  # async recv may reorder envs
      order = np.argsort(env_id)
      obs, reward, terminated, truncated = (
          obs[order], reward[order], terminated[order], truncated[order])
      if game_over is not None:
        game_over = game_over[order]
    return StepResult(
        obs={self._key: obs},
        reward=reward.astype(np.float32) * self._reward_scale,
        terminated=terminated.astype(bool), truncated=truncated.astype(bool),
        task_id=self._task_ids,
        game_over=None if game_over is None else game_over.astype(bool))

  def reset(self) -> StepResult:
    obs, info = self._pool.reset()
    zeros = np.zeros((self.num_envs,), np.float32)
    flags = np.zeros((self.num_envs,), bool)
    return self._result(obs, zeros, flags, flags, info)

  def step_async(self, actions: np.ndarray) -> None:
    """Sends int [B] actions to the pool and returns at once; `step_wait` collects."""
    self._pool.send(np.asarray(actions, np.int32), self._all_ids)

  def step_wait(self) -> StepResult:
    """Waits for the step `step_async` sent; its StepResult, in env order."""
    return self._result(*self._pool.recv())

  def step(self, actions: np.ndarray) -> StepResult:
    self.step_async(actions)
    return self.step_wait()

  def render(self, env_ids=(0,)) -> np.ndarray:
    """uint8 [n, H, W, 3]: envs `env_ids`' screens in colour at full resolution;
    ValueError when made without render=True."""
    if not self._render:
      raise ValueError('EnvPoolEnv was made without render=True')
    return self._pool.render(np.asarray(env_ids, np.int32))

  def close(self) -> None:
    self._pool.close()
