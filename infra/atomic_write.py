"""Files that appear whole or not at all: written under a temporary name
beside their place, then renamed over it (os.replace is atomic within a
folder). A crash mid-write leaves the old file (or none), never a half one."""

import contextlib
import os
from typing import Optional


@contextlib.contextmanager
def atomic_path(path: str):
  """Yields a temporary path beside `path`; renamed to `path` if the block
  succeeds, removed if it raises (then `path` is as it was).

  The temporary path keeps the extension, so a writer that picks its format
  by the name picks the same one.
  """
  folder, name = os.path.split(path)
  stem, ext = os.path.splitext(name)
  tmp = os.path.join(folder, f'.{stem}.writing{ext}')
  try:
    yield tmp
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(OSError):
      os.remove(tmp)
    raise


@contextlib.contextmanager
def atomic_open(path: str, mode: str = 'w', **kwargs):
  """open(path, mode) ('w' or 'wb') that appears whole or not at all; fsynced before the rename."""
  with atomic_path(path) as tmp:
    with open(tmp, mode, **kwargs) as f:
      yield f
      f.flush()
      os.fsync(f.fileno())


def output_problem(path: str, flag: str = '--output') -> Optional[str]:
  """Why a tool cannot write its output at `path` (no such folder, or `path`
  is a folder), as one line starting with `flag`; None when it can."""
  folder = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(folder):
    return f'{flag}: no folder {folder} to write {os.path.basename(path)} in'
  if os.path.isdir(path):
    return f'{flag}: {path} is a folder, not a file'
  return None
