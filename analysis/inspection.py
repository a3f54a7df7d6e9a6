"""One episode of a trained agent, step by step: frames and every task's
unnormalised value (for the inspect_agent notebook)."""

import dataclasses
from typing import List, Optional

import jax
import jax.numpy as jnp
import numpy as np

from analysis import evaluation
from rl import popart
from agents.rollout import Episode
from analysis.run_loading import LoadedRun


@dataclasses.dataclass
class EpisodeTrace:
  """One episode traced by `trace_episode`, step by step."""
  frames: List            # what a video shows at each step (RGB, or NetHack tty frames)
  values: np.ndarray      # [T, K] unnormalised value of each value head at each step
  episode: Optional[Episode]  # its return and length; None if max_steps cut it
  task_names: tuple


def trace_episode(run: LoadedRun, task_id: int, max_steps: int = 2000, seed: int = 0,
                  greedy: bool = False) -> EpisodeTrace:
  """Plays one episode of a task in one env, recording at each step, before
  the action, the frame a video shows and every value head's value."""
  stats = run.variables['popart']['value_head']

  @jax.jit
  def values_of(variables, obs, first, state):
    _, v, _ = run.network.apply(variables, jax.tree.map(lambda x: x[None], obs),
                                first[None], state)
    return popart.unnormalize_all(stats, v[0, 0])  # [K]

  frames, values = [], []

  def observe(step, obs, first, state, frame):
    values.append(np.asarray(values_of(run.variables, obs, jnp.asarray(first), state)))
    frames.append(frame)

  episode = evaluation.play_one_episode(run, task_id, observe, max_steps, seed, greedy)
  return EpisodeTrace(frames, np.stack(values), episode, run.plan.task_names)
