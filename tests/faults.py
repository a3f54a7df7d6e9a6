"""Real failures injected into real envs and run folders: an env whose
step() raises, a checkpoint's largest data file (to damage)."""

import os

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
