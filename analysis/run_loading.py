"""Loading a trained run back: its config, network and checkpointed variables.

Reads only. The latest checkpoint means the newest intact one (newer damaged ones are skipped and
named in `LoadedRun.skipped`); one asked for by step that fails its check stops with one line.
"""

import dataclasses
import os
from typing import Any, Dict, List, Optional, Tuple

import ml_collections

from agents.builder import build_agent
from agents import checkpoint
from agents.checkpoint import CheckpointError, Checkpointer
from configs import common, resume, validation
from configs.plan import RunPlan
from configs.spec import RunSpec
from envs import registry
from networks import agent as agent_net
from rundir import run_folder


@dataclasses.dataclass(frozen=True)
class LoadedRun:
  """A run's spec and the policy of one of its checkpoints."""
  workdir: str
  spec: RunSpec                       # as trained, but for one learner device
  plan: RunPlan
  network: agent_net.AgentNetwork
  variables: Dict[str, Any]           # {'params', 'popart'}: what network.apply takes
  env_steps: int                      # the checkpoint's env step
  num_actions: int
  observation_spec: Dict[str, tuple]  # the env's keys (without prev_action / prev_reward)
  skipped: Tuple[Tuple[int, str], ...] = ()  # (step, what is wrong): newer damaged checkpoints

RESTORE_TRIES = 3  # a running trainer may rotate the chosen checkpoint away while it loads


def load_config(workdir: str) -> ml_collections.ConfigDict:
  """A run's config from <workdir>/config.json (rundir/run_logger.py), JSON
  lists as tuples again, fields added since at their defaults.

  Raises:
    FileNotFoundError: when there is no folder or no config.json.
    rundir.run_folder.RunFolderError: when config.json cannot be read.
  """
  if not os.path.isdir(workdir):
    raise FileNotFoundError(f'no run folder at {workdir}')
  saved = run_folder.read_config(workdir)
  if saved is None:
    raise FileNotFoundError(f'{workdir} has no {run_folder.CONFIG_FILE}, so it is not a run '
                            'folder (launch/train.py writes one at the start of a run)')
  return resume.from_source(_with_defaults(saved, resume.as_source(common.base_config())))


def _with_defaults(saved: dict, defaults: dict) -> dict:
  out = dict(saved)
  for key, value in defaults.items():
    if key not in out:
      out[key] = value
    elif isinstance(value, dict) and isinstance(out[key], dict):
      out[key] = _with_defaults(out[key], value)
  return out


def checkpoint_steps(workdir: str) -> Tuple[int, ...]:
  """The env steps of a run's checkpoints, ascending (read-only; damaged ones included)."""
  return tuple(Checkpointer(workdir, read_only=True).steps())


def load_run(workdir: str, step: Optional[int] = None) -> LoadedRun:
  """Loads a run's config and network and restores checkpoint `step` (None: the newest intact one),
  the agent built as training built it on one learner device, without envs or threads.

  Raises:
    FileNotFoundError: naming what is missing: the folder, its config.json,
      any checkpoint, or the step asked for (listing those there are).
    configs.validation.ConfigError: when the saved config no longer validates.
    agents.checkpoint.CheckpointError: when the checkpoint asked for, or every one, is damaged.
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
  spec = validation.validate_spec(config)
  plan = spec.plan

  # The agent built as the Trainer builds it: its learner state is the
  # restore target (orbax needs the tree, shapes and dtypes).
  group = plan.actor_env_groups[0][0]
  num_actions, obs_spec = registry.env_spaces(group.env_id, group.env_kwargs,
                                              plan.observation_keys)
  agent = build_agent(spec, num_actions, obs_spec, with_update=False)
  network, like = agent.network, agent.state
  checkpointer.close()
  restored, skipped = _restore(workdir, like, step)
  state = restored['state']
  return LoadedRun(
      workdir=workdir, spec=spec, plan=plan, network=network,
      variables={'params': state.params, 'popart': state.popart},
      env_steps=restored['env_steps'], num_actions=num_actions, observation_spec=obs_spec,
      skipped=tuple(skipped))


def _restore(workdir: str, like, step: Optional[int]):
  """(restored checkpoint, [(step, what is wrong)] of the newer damaged ones
  skipped) for `step`, or the newest intact checkpoint when None. One that
  passes its check but does not restore counts as damaged too."""
  root = checkpoint.directory(workdir)
  skipped: List[Tuple[int, str]] = []
  rotated = 0
  while True:
    bad = {s for s, _ in skipped}
    candidates = ([step] if step is not None else
                  [s for s in reversed(checkpoint.steps_on_disk(workdir)) if s not in bad])
    if not candidates:
      if not skipped:  # every checkpoint deleted meanwhile
        raise FileNotFoundError(f'no checkpoints in {root}')
      raise CheckpointError(f'every checkpoint in {root} is damaged (the latest, at env step '
                            f'{skipped[0][0]:,}: {skipped[0][1]})')
    chosen = candidates[0]
    step_dir = os.path.join(root, str(chosen))
    problem = checkpoint.damage(step_dir)
    if problem is None:
      reader = Checkpointer(workdir, read_only=True)
      try:
        return reader.restore(like, env_steps=chosen), skipped
      except (CheckpointError, FileNotFoundError) as e:
        if step is not None and os.path.isdir(step_dir):
          raise
        problem = str(e)
      finally:
        reader.close()
    if os.path.isdir(step_dir):  # damaged, not rotated away
      if step is not None:
        raise CheckpointError(f'the checkpoint at env step {step:,} in {root} is damaged '
                              f'({problem})')
      skipped.append((chosen, problem))
      continue
    if step is not None:  # rotated away; another step would not be the one asked for
      raise FileNotFoundError(f'the checkpoint at env step {step} in {root} was deleted while '
                              'it loaded (a trainer writing this run keeps its last '
                              f'{checkpoint.KEEP_LAST}); available now: '
                              f'{", ".join(map(str, checkpoint.steps_on_disk(workdir)))}')
    rotated += 1
    if rotated >= RESTORE_TRIES:
      raise CheckpointError(f'the newest checkpoint in {root} was deleted while it loaded, '
                            f'{RESTORE_TRIES} times (a trainer writing this run rotates them)')
