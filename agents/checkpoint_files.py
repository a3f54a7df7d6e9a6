"""A checkpoint's files on disk: the manifest that verifies them, the damage
found against it, damaged checkpoints set aside, and the newest intact one
(agents/checkpoint.py's docstring says how the pieces fit)."""

import hashlib
import json
import os
import shutil
from typing import List, Optional, Tuple

SUBDIR = 'checkpoints'
DAMAGED_SUBDIR = 'checkpoints.damaged'
MANIFEST = 'verified.json'


class CheckpointError(RuntimeError):
  """A checkpoint cannot be written or restored; the message is one line."""


def directory(workdir: str) -> str:
  return os.path.abspath(os.path.join(workdir, SUBDIR))


def _files(step_dir: str) -> List[str]:
  out = []
  for root, _, names in os.walk(step_dir):
    for name in names:
      rel = os.path.relpath(os.path.join(root, name), step_dir)
      if rel != MANIFEST:
        out.append(rel)
  return sorted(out)


def _digest(path: str) -> str:
  h = hashlib.sha256()
  with open(path, 'rb') as f:
    for chunk in iter(lambda: f.read(1 << 20), b''):
      h.update(chunk)
  return h.hexdigest()


def write_manifest(step_dir: str) -> None:
  """Reads every file of the checkpoint at `step_dir` back into its manifest,
  `verified.json` = {'files': {relative path: [size, SHA-256 hex]}}."""
  files = {rel: [os.path.getsize(os.path.join(step_dir, rel)), _digest(os.path.join(step_dir, rel))]
           for rel in _files(step_dir)}
  tmp = os.path.join(step_dir, MANIFEST + '.tmp')
  with open(tmp, 'w') as f:
    json.dump({'files': files}, f, indent=1, sort_keys=True)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, os.path.join(step_dir, MANIFEST))


def damage(step_dir: str) -> Optional[str]:
  """What is wrong with the checkpoint at `step_dir` (one line), or None. Reads only."""
  manifest_path = os.path.join(step_dir, MANIFEST)
  if not os.path.isfile(manifest_path):
    return f'no {MANIFEST}: cut off before it was verified'
  try:
    with open(manifest_path) as f:
      files = json.load(f)['files']
  except (OSError, ValueError, KeyError) as e:
    return f'its manifest {MANIFEST} is unreadable ({e})'
  for rel, (size, digest) in sorted(files.items()):
    path = os.path.join(step_dir, rel)
    if not os.path.isfile(path):
      return f'{rel} is missing'
    if os.path.getsize(path) != size:
      return f'{rel} has {os.path.getsize(path):,} bytes, {size:,} when written'
    if _digest(path) != digest:
      return f'{rel} differs from what was written'
  return None


def set_aside(workdir: str, step: int) -> str:
  """Moves a checkpoint out of orbax's sight, keeping it; returns where it went
  (`checkpoints.damaged/<step>`, or `<step>.<n>` when that is taken)."""
  dest_dir = os.path.join(os.path.abspath(workdir), DAMAGED_SUBDIR)
  os.makedirs(dest_dir, exist_ok=True)
  dest, n = os.path.join(dest_dir, str(step)), 1
  while os.path.exists(dest):
    n += 1
    dest = os.path.join(dest_dir, f'{step}.{n}')
  shutil.move(os.path.join(directory(workdir), str(step)), dest)
  return dest


def steps_on_disk(workdir: str) -> List[int]:
  """Env steps of the `checkpoints/<step>` folders, ascending ([] without any). Reads only."""
  root = directory(workdir)
  if not os.path.isdir(root):
    return []
  return sorted(int(n) for n in os.listdir(root)
                if n.isdigit() and os.path.isdir(os.path.join(root, n)))


def find_intact(workdir: str) -> Tuple[Optional[int], List[Tuple[int, str]]]:
  """The newest intact checkpoint, checking newest first (`damage`). Reads only.

  Returns:
    (its step or None, [(step, what is wrong)] for the damaged ones newer than it, newest first).
  """
  damaged = []
  for step in reversed(steps_on_disk(workdir)):
    problem = damage(os.path.join(directory(workdir), str(step)))
    if problem is None:
      return step, damaged
    damaged.append((step, problem))
  return None, damaged
