"""One episode of a trained agent, step by step: frames, actions, rewards
and every task's unnormalised value (for the inspect_agent notebook)."""

import dataclasses
from typing import List

import jax
import jax.numpy as jnp
import numpy as np

from agents import evaluation, popart
from agents.run_loading import LoadedRun


@dataclasses.dataclass
class EpisodeTrace:
  frames: List[np.ndarray]   # what a video shows at each step (RGB, or NetHack tty frames)
  actions: np.ndarray        # [T]
  rewards: np.ndarray        # [T]
  values: np.ndarray         # [T, K] unnormalised value of each value head at each step
  task_names: tuple


def trace_episode(run: LoadedRun, task_id: int, max_steps: int = 2000, seed: int = 0,
                  greedy: bool = False) -> EpisodeTrace:
  """Plays one episode (at most max_steps) of the task with one env."""
  env, frame_fn, _ = evaluation.make_task_env(run, task_id, 1, seed=seed, video=True)
  policy = evaluation.make_policy(run.network, greedy)
  stats = run.variables['popart']['value_head']

  @jax.jit
  def values_of(variables, obs, first, state):
    _, v, _ = run.network.apply(variables, jax.tree.map(lambda x: x[None], obs),
                                first[None], state)
    return popart.sigma(stats) * v[0, 0] + stats['mu']  # [K]

  frames, actions, rewards, values = [], [], [], []
  rng, state = jax.random.key(seed), run.network.initial_state(1)
  result = env.reset()
  first = np.ones(1, bool)
  prev_action, prev_reward = np.zeros(1, np.int32), np.zeros(1, np.float32)
  try:
    for _ in range(max_steps):
      obs = {k: np.asarray(result.obs[k]) for k in run.observation_spec}
      obs['prev_action'] = np.where(first, 0, prev_action).astype(np.int32)
      obs['prev_reward'] = np.where(first, 0.0, prev_reward).astype(np.float32)
      values.append(np.asarray(values_of(run.variables, obs, jnp.asarray(first), state)))
      if frame_fn is not None:
        frames.append(frame_fn(result))
      action, state, rng = policy(run.variables, obs, first, state, rng)
      result = env.step(action)
      actions.append(int(action[0]))
      rewards.append(float(result.reward[0]))
      if result.game_ended[0]:
        break
      first = result.terminated | result.truncated  # a lost life: the core resets
      prev_action, prev_reward = action, result.reward
  finally:
    env.close()
  return EpisodeTrace(frames, np.array(actions), np.array(rewards), np.stack(values),
                      run.plan.task_names)
