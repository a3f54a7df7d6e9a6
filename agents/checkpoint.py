"""Orbax checkpoints at `<workdir>/checkpoints/<env_steps>/`: learner state, env-step counter and
the actors' RNG key. With several processes every call is collective.

Guarantees: each checkpoint is read back when written into a manifest (`verified.json`, size and
SHA-256 per file); a resume takes the newest intact one and moves damaged ones to
`checkpoints.damaged/`; an older checkpoint is deleted only after a newer one verified; one without
a manifest was cut off and counts as damaged.
"""

import errno
import os
from typing import Any, Dict, List, Optional, Sequence

from absl import logging
import jax
import numpy as np
import orbax.checkpoint as ocp

from infra import multihost
from agents.checkpoint_files import (DAMAGED_SUBDIR, MANIFEST, SUBDIR, CheckpointError, damage,
                                     directory, find_intact, set_aside, steps_on_disk,
                                     write_manifest)
from agents.learner import LearnerState

# The files' side (agents/checkpoint_files.py) is part of this module's API.
__all__ = ['Checkpointer', 'CheckpointError', 'DAMAGED_SUBDIR', 'KEEP_LAST', 'MANIFEST',
           'SUBDIR', 'damage', 'directory', 'find_intact', 'set_aside', 'steps_on_disk',
           'write_manifest']

KEEP_LAST = 2  # checkpoints kept when keep_intermediate is False


def _no_space(e: BaseException) -> Optional[str]:
  """The full-disk words if `e` or an error it came from is a full disk, else None."""
  seen = set()
  while e is not None and id(e) not in seen:
    seen.add(id(e))
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
      return os.strerror(e.errno).lower()
    text = str(e)
    for words in ('No space left on device', 'Disk quota exceeded'):
      if words in text:
        return words.lower()
    e = e.__cause__ or e.__context__
  return None


def _saved_fields(state: LearnerState) -> Dict[str, Any]:
  """The fields a checkpoint holds, less an `algorithm` state without arrays, so
  IMPALA's and PPO's checkpoints keep their layout."""
  fields = state._asdict()
  if not jax.tree.leaves(fields['algorithm']):
    del fields['algorithm']
  return fields


class Checkpointer:
  """Writes, verifies, rotates and restores the checkpoints of a run folder.

  The primary process verifies, writes the manifests and sets damaged checkpoints aside; every
  process acts on its verdict. Rotation is here, after verification, not orbax's max_to_keep.

  Args:
    keep_intermediate: keep every checkpoint; False keeps the newest KEEP_LAST.
    read_only: open for restoring only: nothing is created or written.
    primary: process 0.
  """

  def __init__(self, workdir: str, keep_intermediate: bool = False, read_only: bool = False,
               primary: bool = True):
    self._workdir = workdir
    self._keep_intermediate = keep_intermediate
    self._primary = primary  # writes the manifests and deletes old checkpoints
    self.problems: List[str] = []  # checkpoints that failed verification when written
    self._verified: set = set()     # steps this process wrote (or found intact) and verified
    self._manager = ocp.CheckpointManager(
        directory(workdir),
        options=ocp.CheckpointManagerOptions(
            max_to_keep=None, create=not read_only, read_only=read_only,
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

  def save(self, env_steps: int, state: LearnerState, rng: jax.Array) -> bool:
    """Writes and verifies a checkpoint at `env_steps`; every process calls it.

    One that fails verification is set aside and named in `problems`, and the next save tries again.
    One already at that step is kept if intact, else rewritten.

    Returns:
      True when one was written now (verified or not), False when that step is saved already.

    Raises:
      CheckpointError: the disk is full (one line naming the newest intact
        checkpoint); orbax's other errors pass through.
    """
    if env_steps in self._verified:
      return False
    self._manager.reload()  # orbax's list may lag a save cut off by a signal
    if env_steps in self._manager.all_steps():
      # Written before (an earlier run, or cut off before its manifest): process 0 decides for all.
      step_dir = os.path.join(self.directory, str(env_steps))
      problem = damage(step_dir) if self._primary else None
      problem = multihost.allgather_json(problem)[0]
      if problem is None:
        self._verified.add(env_steps)
        return False
      if self._primary:
        set_aside(self._workdir, env_steps)
      multihost.allgather_json(None)  # moved before anyone reloads
      self._manager.reload()
    # Host values are the same on every process; orbax writes them once.
    item = {'state': _saved_fields(state), 'env_steps': np.asarray(env_steps, np.int64),
            'rng': np.asarray(jax.random.key_data(rng))}
    try:
      self._manager.save(env_steps, args=ocp.args.StandardSave(item))
      self._manager.wait_until_finished()
    except Exception as e:  # noqa: BLE001 -- orbax wraps OS errors in several kinds
      self._raise_if_disk_full(env_steps, e)
      raise
    # Process 0 verifies; every process acts alike (orbax's delete is collective).
    try:
      problem = self._verify_written(env_steps, item) if self._primary else None
    except Exception as e:  # noqa: BLE001 -- only a full disk escapes _verify_written
      self._raise_if_disk_full(env_steps, e)
      raise
    problem = multihost.allgather_json(problem)[0]
    if problem is not None:
      moved = set_aside(self._workdir, env_steps) if self._primary else 'checkpoints.damaged'
      multihost.allgather_json(None)  # moved before anyone reloads
      self._manager.reload()
      self.problems.append(f'the checkpoint at env step {env_steps:,} failed verification '
                           f'({problem}); moved to {moved}')
      logging.warning('%s', self.problems[-1])
      return True
    self._verified.add(env_steps)
    self._rotate()
    return True

  def _raise_if_disk_full(self, env_steps: int, e: BaseException) -> None:
    """Raises the one-line CheckpointError if `e` comes from a full disk."""
    full = _no_space(e)
    if not full:
      return
    intact = [s for s in self.steps() if s != env_steps and (
        s in self._verified or damage(os.path.join(self.directory, str(s))) is None)]
    newest = (f'the newest intact checkpoint is at env step {intact[-1]:,} in {self.directory}'
              if intact else 'no checkpoint was written before it')
    raise CheckpointError(f'cannot write the checkpoint at env step {env_steps:,}: {full}; '
                          f'{newest}. Free space and resume with the same command') from None

  def _verify_written(self, env_steps: int, item) -> Optional[str]:
    step_dir = os.path.join(self.directory, str(env_steps))
    try:
      metadata = self._manager.item_metadata(env_steps)
      saved = jax.tree.leaves(jax.tree.map(lambda m: str(tuple(m.shape)), metadata))
      expected = jax.tree.leaves(jax.tree.map(lambda x: str(tuple(np.shape(x))), item))
      if saved != expected:
        return "its metadata does not list the state's arrays"
      write_manifest(step_dir)
    except Exception as e:  # noqa: BLE001 -- any failure to read it back is damage
      if _no_space(e):  # not damage: the disk is full (save() says so in one line)
        raise
      return f'{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ""}'
    return damage(step_dir)

  def _rotate(self) -> None:
    """Deletes all but the newest KEEP_LAST checkpoints (all verified)."""
    if self._keep_intermediate:
      return
    for step in self.steps()[:-KEEP_LAST]:
      self._manager.delete(step)

  def restore(self, like: LearnerState, env_steps: Optional[int] = None,
              ) -> Dict[str, Any]:
    """Restores a checkpoint (None: the newest) into the shapes and placement of `like`.

    Returns:
      {'state': LearnerState, 'env_steps': int, 'rng': key}.

    Raises:
      FileNotFoundError: no checkpoint, or none at `env_steps`.
      CheckpointError: orbax cannot restore it into `like` (one line).
    """
    step = self.latest_step() if env_steps is None else env_steps
    if step is None:
      raise FileNotFoundError(f'no checkpoint in {self._manager.directory}')
    self._check_step(step)
    abstract = {'state': jax.tree.map(ocp.utils.to_shape_dtype_struct, _saved_fields(like)),
                'env_steps': np.asarray(0, np.int64),
                'rng': jax.random.key_data(jax.random.key(0))}
    try:
      item = self._manager.restore(step, args=ocp.args.StandardRestore(abstract))
    except Exception as e:  # noqa: BLE001 -- orbax raises many kinds; one line says which
      first = next((line.strip() for line in str(e).splitlines() if line.strip()), '')
      raise CheckpointError(
          f'cannot restore the checkpoint at env step {step:,} in {self.directory} into this '
          f"run's learner state ({type(e).__name__}: {first[:300]})") from e
    state = LearnerState(**{'algorithm': like.algorithm, **item['state']})
    return {'state': state, 'env_steps': int(item['env_steps']),
            'rng': jax.random.wrap_key_data(np.asarray(item['rng']))}

  def restore_raw(self, env_steps: int) -> Dict[str, Any]:
    """A checkpoint as saved, as nested dicts of arrays ('state', 'env_steps',
    'rng'), with no target structure needed; FileNotFoundError if absent."""
    self._check_step(env_steps)
    return self._manager.restore(env_steps, args=ocp.args.StandardRestore())

  def _check_step(self, env_steps: int) -> None:
    if env_steps not in self._manager.all_steps():
      raise FileNotFoundError(f'no checkpoint at env step {env_steps} in '
                              f'{self._manager.directory}; have {", ".join(map(str, self.steps()))}')

  def close(self) -> None:
    self._manager.close()
