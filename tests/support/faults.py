"""Real failures injected into real envs and run folders: an env whose
step() raises, an env whose rewards turn NaN, a checkpoint's largest data
file (to damage)."""

import dataclasses
import os

import numpy as np

from envs import registry


def largest_data_file(step_dir) -> str:
  """The largest array data file of an orbax checkpoint folder."""
  data = [os.path.join(root, n) for root, _, names in os.walk(step_dir)
          for n in names if os.sep + 'd' + os.sep in os.path.join(root, n)]
  return max(data, key=os.path.getsize)


def make_env_step_fail(monkeypatch_or_none, should_fail, after_steps: int) -> None:
  """From now on, envs made by registry.make_actor_envs raise
  RuntimeError('env exploded on purpose') in step() after `after_steps`
  steps when should_fail(index of the env made, 0 first) is true. Patches
  through pytest's monkeypatch, or directly (a worker process) when None."""
  make, made = registry.make_actor_envs, []

  def make_envs(*args, **kwargs):
    env = make(*args, **kwargs)
    if should_fail(len(made)):
      step, calls = env.step, [0]

      def step_then_fail(action):
        calls[0] += 1
        if calls[0] > after_steps:
          raise RuntimeError('env exploded on purpose')
        return step(action)
      env.step = step_then_fail
    made.append(env)
    return env

  if monkeypatch_or_none is None:
    registry.make_actor_envs = make_envs
  else:
    monkeypatch_or_none.setattr(registry, 'make_actor_envs', make_envs)


def nan_reward_call(update: int, unroll_length: int) -> int:
  """The env step (1-based, per actor) whose reward first reaches learner
  update `update` (1-based) of a single-actor run that takes one block per
  update: that block's first step (a block holds steps (u-1)T+1 .. uT+1)."""
  return (update - 1) * unroll_length + 1


def make_rewards_nan(monkeypatch_or_none, at_call: int) -> None:
  """From now on, envs made by registry.make_actor_envs give NaN rewards on
  their `at_call`-th step() (1-based) and after: a fault a real env could
  have, reaching the learner as a non-finite loss. Patches through pytest's
  monkeypatch, or directly (a subprocess) when None."""
  make = registry.make_actor_envs

  def make_envs(*args, **kwargs):
    env = make(*args, **kwargs)
    step, calls = env.step, [0]

    def step_with_nan(action):
      result = step(action)
      calls[0] += 1
      if calls[0] >= at_call:
        result = dataclasses.replace(result, reward=np.full_like(result.reward, np.nan))
      return result
    env.step = step_with_nan
    return env

  if monkeypatch_or_none is None:
    registry.make_actor_envs = make_envs
  else:
    monkeypatch_or_none.setattr(registry, 'make_actor_envs', make_envs)
