"""Files that appear whole or not at all: written beside their place under a
temporary name, then renamed over it (os.replace is atomic within a
folder). A full disk, a crash or a signal mid-write leaves the old file (or
none) and no empty or half-written one; the temporary file is removed when
the write fails."""

import contextlib
import os
from typing import Optional


@contextlib.contextmanager
def atomic_path(path: str):
  """Yields a temporary path beside `path` to write; renames it to `path`
  when the block ends without an error, and removes it when it fails.

  Args:
    path: the file to write.

  Yields:
    The temporary path (same folder, same extension, so a writer that picks
    its format by the name picks the same one).

  Raises:
    Whatever the block or the rename raises; `path` is then as it was.
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
  """open(path, mode) for writing that appears whole or not at all (see
  `atomic_path`); the data is flushed to disk before the rename.

  Args:
    path: the file to write.
    mode: 'w' or 'wb'.
    **kwargs: open's others (newline='' for csv).

  Yields:
    The open file.
  """
  with atomic_path(path) as tmp:
    with open(tmp, mode, **kwargs) as f:
      yield f
      f.flush()
      os.fsync(f.fileno())


def output_problem(path: str, flag: str = '--output') -> Optional[str]:
  """Why a tool cannot write its output file at `path`, found before the
  tool does its work: the folder it goes in does not exist, or `path` is a
  folder. None when neither.

  Args:
    path: the file the tool will write.
    flag: the flag that named it, for the message.

  Returns:
    One line ('--output: no folder /x to write y.json in', '--output: /x is
    a folder, not a file'), or None.
  """
  folder = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(folder):
    return f'{flag}: no folder {folder} to write {os.path.basename(path)} in'
  if os.path.isdir(path):
    return f'{flag}: {path} is a folder, not a file'
  return None
