"""Files that appear whole or not at all: written beside their place under a
temporary name, then renamed over it (os.replace is atomic within a
folder). A full disk, a crash or a signal mid-write leaves the old file (or
none) and no empty or half-written one; the temporary file is removed when
the write fails."""

import contextlib
import os


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
def atomic_open(path: str, mode: str = 'w'):
  """open(path, mode) for writing that appears whole or not at all (see
  `atomic_path`); the data is flushed to disk before the rename.

  Args:
    path: the file to write.
    mode: 'w' or 'wb'.

  Yields:
    The open file.
  """
  with atomic_path(path) as tmp:
    with open(tmp, mode) as f:
      yield f
      f.flush()
      os.fsync(f.fileno())
