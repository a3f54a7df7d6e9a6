"""Loading a trained run back: its config, network and checkpointed variables.

`load_run(workdir, step)` rebuilds what `agents.sebulba.Trainer` built (the
config from <workdir>/config.json, the RunPlan, the network, a 1-device
learner state as the restore target) without starting envs or threads, and
restores a checkpoint into it. Evaluation, saliency tools and notebooks all
start here.
"""

import dataclasses
import json
import os
from typing import Any, Dict, Optional, Sequence, Tuple

import jax
import ml_collections
import numpy as np

from agents import learner as learner_lib
from agents.actor import host_dtype, observation_spec_with_prev
from agents.checkpoint import Checkpointer
from configs import common, validation
from envs import registry
from networks import agent as agent_net


@dataclasses.dataclass(frozen=True)
class LoadedRun:
  """A run's config and the policy of one of its checkpoints."""
  workdir: str
  config: ml_collections.ConfigDict   # as trained, but for one learner device
  plan: validation.RunPlan
  network: agent_net.AgentNetwork
  variables: Dict[str, Any]           # {'params', 'popart'}: what network.apply takes
  env_steps: int                      # the checkpoint's env step
  num_actions: int
  observation_spec: Dict[str, tuple]  # the env's keys (without prev_action / prev_reward)


def _tuples(value):
  """JSON lists back to the tuples the config files use (ConfigDict keeps them)."""
  if isinstance(value, list):
    return tuple(_tuples(v) for v in value)
  if isinstance(value, dict):
    return {k: _tuples(v) for k, v in value.items()}
  return value


def load_config(workdir: str) -> ml_collections.ConfigDict:
  """The run's config from <workdir>/config.json (written by launch/run_logger.py)."""
  if not os.path.isdir(workdir):
    raise FileNotFoundError(f'no run folder at {workdir}')
  path = os.path.join(workdir, 'config.json')
  if not os.path.exists(path):
    raise FileNotFoundError(f'{workdir} has no config.json, so it is not a run folder '
                            '(launch/train.py writes one at the start of a run)')
  with open(path) as f:
    saved = _tuples(json.load(f))
  # Fields added to the configs after the run was written take the value
  # that keeps the behaviour the run had: the default, or for fields whose
  # default changed as they were added, the old behaviour.
  defaults = _with_defaults(_BEFORE_FIELD_EXISTED, common.base_config().to_dict())
  return ml_collections.ConfigDict(_with_defaults(saved, defaults))


# Fields whose current default differs from what a run had before the field.
_BEFORE_FIELD_EXISTED = {
    'network': {'core_extra_inputs': False},  # the core took no extra inputs
}


def _with_defaults(saved: dict, defaults: dict) -> dict:
  out = dict(saved)
  for key, value in defaults.items():
    if key not in out:
      out[key] = value
    elif isinstance(value, dict) and isinstance(out[key], dict):
      out[key] = _with_defaults(out[key], value)
  return out


def env_spaces(env_id: str, env_kwargs: Dict[str, Any], observation_keys: Sequence[str],
               ) -> Tuple[int, Dict[str, tuple]]:
  """(num_actions, observation_spec) of a task's env, without starting envs."""
  family = registry.env_family(env_id)
  if family == 'synthetic':
    module = registry.SYNTHETIC_ENVS[env_id]
    return len(module.ACTION_NAMES), module.observation_spec(env_kwargs)
  if family == 'envpool':
    import envpool
    from envs.envpool_env import observation_key
    spec = envpool.make_spec(env_id, **env_kwargs)
    space = spec.observation_space
    return (int(spec.action_space.n),
            {observation_key(space.shape): (tuple(space.shape), np.dtype(space.dtype))})
  import gymnasium as gym
  from envs.nle_worker import DERIVED_OBS, observation_desc
  kwargs = {k: v for k, v in env_kwargs.items() if k not in ('max_episode_steps', 'savedir')}
  nle_keys = tuple(k for k in observation_keys if k not in DERIVED_OBS)
  env = gym.make(env_id, observation_keys=nle_keys, save_ttyrec_every=0,
                 disable_env_checker=True, **kwargs)
  num_actions = int(env.action_space.n)
  env.close()
  # what envs.nle_env.NLEBatchedEnv reports
  return num_actions, {k: observation_desc(k) for k in observation_keys}


def checkpoint_steps(workdir: str) -> Tuple[int, ...]:
  """Env steps of the run's checkpoints, ascending."""
  return tuple(Checkpointer(workdir, read_only=True).steps())


def load_run(workdir: str, step: Optional[int] = None) -> LoadedRun:
  """Restores the checkpoint at env step `step` (the latest when None).

  FileNotFoundError names what is missing: the folder, its config.json, any
  checkpoint, or the step asked for (listing the steps there are).
  configs.validation.ConfigError if the saved config no longer validates.
  """
  config = load_config(workdir)
  checkpointer = Checkpointer(workdir, read_only=True)
  steps = checkpointer.steps()
  if not steps:
    raise FileNotFoundError(
        f'no checkpoints in {os.path.join(workdir, "checkpoints")}; a run writes one when it '
        f'ends (or is interrupted) and every checkpoint_every_steps env steps')
  if step is not None and step not in steps:
    raise FileNotFoundError(f'no checkpoint at env step {step} in {workdir}; '
                            f'available: {", ".join(map(str, steps))}')

  # One device, whatever the run trained on; the params are replicated anyway.
  with config.unlocked():
    config.num_learner_devices = 1
    config.actor_device_id = 0
  plan = validation.validate(config)

  # The network and a learner state built as the Trainer builds them, as the
  # restore target (orbax needs the tree, shapes and dtypes).
  task = config.tasks[0]
  num_actions, obs_spec = env_spaces(
      task['env_id'], plan.actor_env_groups[0][0].env_kwargs, plan.observation_keys)
  network = agent_net.make_network(config.network, num_actions, plan.num_values)
  example = {k: np.zeros(s, host_dtype(d))
             for k, (s, d) in observation_spec_with_prev(obs_spec).items()}
  variables = agent_net.init_variables(network, jax.random.key(0), example)  # overwritten
  optimizer, _ = learner_lib.optimizer_from_config(config, plan.total_learner_steps)
  like = learner_lib.init_state(variables, optimizer, learner_lib.make_mesh(plan.learner_devices))
  restored = checkpointer.restore(like, env_steps=step)
  checkpointer.close()
  state = restored['state']
  return LoadedRun(
      workdir=workdir, config=config, plan=plan, network=network,
      variables={'params': state.params, 'popart': state.popart},
      env_steps=restored['env_steps'], num_actions=num_actions, observation_spec=obs_spec)
