"""A disk that fills while a tool writes: a launch/ script run in a child
process where every file opened for writing under one folder takes half of
its first write, then raises OSError(ENOSPC), as a full disk does. Reads,
and writes elsewhere (the JAX cache, checkpoints read back), are untouched."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_CHILD = '''
import builtins, errno, io, os, runpy, sys
full = os.path.abspath(sys.argv[1]) + os.sep
real_open = io.open

class FullFile:
  """A file on a full disk: its first write lands in part, then ENOSPC."""
  def __init__(self, f):
    self._f = f
  def write(self, data):
    self._f.write(data[:max(1, len(data) // 2)])
    self._f.flush()
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
  def writelines(self, lines):
    for line in lines:
      self.write(line)
  def __getattr__(self, name):
    return getattr(self._f, name)
  def __iter__(self):
    return iter(self._f)
  def __enter__(self):
    return self
  def __exit__(self, *exc):
    self._f.close()

def full_open(file, mode='r', *args, **kwargs):
  f = real_open(file, mode, *args, **kwargs)
  if (isinstance(file, (str, os.PathLike)) and any(c in mode for c in 'wax+')
      and os.path.abspath(os.fspath(file)).startswith(full)):
    return FullFile(f)
  return f

builtins.open = io.open = full_open
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name='__main__')
'''


def run_tool(script: str, full_folder, *args, timeout: int = 600) -> subprocess.CompletedProcess:
  """Runs launch/`script` with `args` from the repository root, with the disk
  under `full_folder` full. Returns the finished process (stdout and stderr
  as text)."""
  return subprocess.run(
      [sys.executable, '-c', _CHILD, str(full_folder), os.path.join(ROOT, 'launch', script),
       *map(str, args)], check=False, capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def files_under(folder) -> list:
  """Every file under `folder` (relative paths, sorted); [] when it is missing."""
  return sorted(os.path.relpath(os.path.join(root, n), folder)
                for root, _, names in os.walk(folder) for n in names)
