"""Checkpoints of the whole learner state with orbax, numbered by env step.

With several processes every process makes the same calls (orbax's
multi-process checkpointing: they are collective), into one folder all of
them can read.

A checkpoint holds the learner state (params, PopArt statistics, optimiser
state with its schedule count, learner step), the env-step counter and the
RNG key the actors are seeded from. `<workdir>/checkpoints/<env_steps>/`.
"""

import os
from typing import Any, Dict, Optional, Sequence

import jax
import numpy as np
import orbax.checkpoint as ocp

from agents.learner import LearnerState

SUBDIR = 'checkpoints'
KEEP_LAST = 2  # checkpoints kept when keep_intermediate is False


def directory(workdir: str) -> str:
  return os.path.abspath(os.path.join(workdir, SUBDIR))


class Checkpointer:

  def __init__(self, workdir: str, keep_intermediate: bool = False, read_only: bool = False):
    self._manager = ocp.CheckpointManager(
        directory(workdir),
        options=ocp.CheckpointManagerOptions(
            max_to_keep=None if keep_intermediate else KEEP_LAST,
            create=not read_only, read_only=read_only,
            save_interval_steps=0 if read_only else 1,
            enable_async_checkpointing=False))

  @property
  def directory(self) -> str:
    return str(self._manager.directory)

  def steps(self) -> Sequence[int]:
    """Env steps of the checkpoints on disk, ascending."""
    return tuple(sorted(self._manager.all_steps()))

  def latest_step(self) -> Optional[int]:
    return self._manager.latest_step()

  def save(self, env_steps: int, state: LearnerState, rng: jax.Array) -> None:
    if env_steps in self._manager.all_steps():
      return
    # Host values (env steps, the key's data) are the same on every process;
    # with several processes orbax writes them and the replicated state once.
    item = {'state': state._asdict(), 'env_steps': np.asarray(env_steps, np.int64),
            'rng': np.asarray(jax.random.key_data(rng))}
    self._manager.save(env_steps, args=ocp.args.StandardSave(item))
    self._manager.wait_until_finished()

  def restore(self, like: LearnerState, env_steps: Optional[int] = None,
              ) -> Dict[str, Any]:
    """{'state': LearnerState placed like `like`, 'env_steps': int, 'rng': key}."""
    step = self.latest_step() if env_steps is None else env_steps
    if step is None:
      raise FileNotFoundError(f'no checkpoint in {self._manager.directory}')
    self._check_step(step)
    abstract = {'state': jax.tree.map(ocp.utils.to_shape_dtype_struct, like._asdict()),
                'env_steps': np.asarray(0, np.int64),
                'rng': jax.random.key_data(jax.random.key(0))}
    item = self._manager.restore(step, args=ocp.args.StandardRestore(abstract))
    return {'state': LearnerState(**item['state']), 'env_steps': int(item['env_steps']),
            'rng': jax.random.wrap_key_data(np.asarray(item['rng']))}

  def restore_raw(self, env_steps: int) -> Dict[str, Any]:
    """A checkpoint as saved, as nested dicts of arrays, with no target
    structure needed (for analyses: `['state']['params']`)."""
    self._check_step(env_steps)
    return self._manager.restore(env_steps, args=ocp.args.StandardRestore())

  def _check_step(self, env_steps: int) -> None:
    if env_steps not in self._manager.all_steps():
      raise FileNotFoundError(f'no checkpoint at env step {env_steps} in '
                              f'{self._manager.directory}; have {", ".join(map(str, self.steps()))}')

  def close(self) -> None:
    self._manager.close()
