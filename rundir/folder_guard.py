"""A run folder's guards: a path the filesystem takes, a folder that can be written, and one writer
at a time (`RunLock`). Every failure is a one-line `RunFolderError`."""

import contextlib
import fcntl
import json
import os
import socket
import time
from typing import Optional

LOCK_FILE = 'run.lock'


class RunFolderError(RuntimeError):
  """The run folder cannot be used as asked; the message is one line."""


# Room for the longest path a run writes inside its folder (orbax's
# temporary checkpoint files, about 150 bytes), twice over.
INNER_PATH_ROOM = 300


def check_path_length(workdir: str) -> None:
  """Raises RunFolderError (asking for a shorter --config.workdir) when a name
  in the path passes NAME_MAX, or the path leaves less than INNER_PATH_ROOM
  under PATH_MAX, as the nearest existing folder's filesystem says. Writes nothing."""
  path = os.path.abspath(workdir)
  probe = path
  while not os.path.exists(probe):
    probe = os.path.dirname(probe)
  try:
    name_max, path_max = os.pathconf(probe, 'PC_NAME_MAX'), os.pathconf(probe, 'PC_PATH_MAX')
  except (OSError, ValueError):
    name_max, path_max = 255, 4096
  for part in path.split(os.sep):
    if len(os.fsencode(part)) > name_max:
      raise RunFolderError(f'workdir {workdir[:60]}...: the name {part[:40]}... is '
                           f'{len(os.fsencode(part)):,} bytes; this filesystem allows {name_max}. '
                           'Choose a shorter --config.workdir')
  if len(os.fsencode(path)) + INNER_PATH_ROOM > path_max:
    raise RunFolderError(f'workdir {path[:60]}... is {len(os.fsencode(path)):,} bytes long; '
                         f'with the {INNER_PATH_ROOM} a run needs for the files inside it, that passes this '
                         f"filesystem's limit of {path_max:,}. Choose a shorter --config.workdir")


def check_usable(workdir: str) -> None:
  """Creates the run folder if needed; RunFolderError when it is a file or a
  broken link, cannot be created or written, or its path is too long."""
  check_path_length(workdir)
  if os.path.islink(workdir) and not os.path.exists(workdir):
    raise RunFolderError(f'workdir {workdir} is a symbolic link to {os.readlink(workdir)}, which '
                         'does not exist or loops back on itself; fix the link or choose another '
                         '--config.workdir')
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise RunFolderError(f'workdir {workdir} is a file, not a folder; choose another '
                         '--config.workdir')
  try:
    os.makedirs(workdir, exist_ok=True)
  except OSError as e:
    raise RunFolderError(f'cannot create workdir {workdir}: {e.strerror or e}') from None
  if not os.access(workdir, os.W_OK | os.X_OK):
    raise RunFolderError(f'workdir {workdir} is not writable')


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


class RunLock:
  """The one-writer lock of a run folder: an flock on `<workdir>/run.lock`.

  The kernel drops an flock when its process dies (kill -9 too), so a lock nobody holds is stale and
  is taken over (`stale_holder` then holds its record). Where flock is unsupported (some network
  filesystems), the recorded pid is checked on the same host. The file holds one JSON line {'host',
  'pid', 'started'}.
  """

  def __init__(self, workdir: str):
    self.path = os.path.join(workdir, LOCK_FILE)
    self._fd: Optional[int] = None
    self.stale_holder: Optional[dict] = None

  def acquire(self) -> 'RunLock':
    """Takes the lock without waiting and writes this process into it; returns self.

    Raises:
      RunFolderError: another live trainer holds it (named), the file cannot
        be written (a full disk: it is removed), or it keeps being replaced.
    """
    for _ in range(10):
      fd = self._try_acquire()
      try:  # the file locked must still be the one at the path: a holder
        if os.fstat(fd).st_ino == os.stat(self.path).st_ino:  # releasing unlinks it
          break
      except FileNotFoundError:
        pass
      os.close(fd)
    else:
      raise RunFolderError(f'cannot take the lock {self.path}: it keeps being replaced')
    self._fd = fd
    return self

  def _try_acquire(self) -> int:
    try:
      fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
      raise RunFolderError(f'cannot create the lock {self.path}: {e.strerror or e}') from None
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      holder = _read_holder(fd)
      os.close(fd)
      raise self._in_use(holder) from None
    except OSError:  # no flock here: trust the recorded pid on this host
      holder = _read_holder(fd)
      if holder and holder.get('host') == socket.gethostname() and _alive(holder.get('pid', -1)) \
          and holder.get('pid') != os.getpid():
        os.close(fd)
        raise self._in_use(holder) from None
    previous = _read_holder(fd)
    if previous:
      self.stale_holder = previous
    me = {'host': socket.gethostname(), 'pid': os.getpid(),
          'started': time.strftime('%Y-%m-%d %H:%M:%S')}
    try:
      os.ftruncate(fd, 0)
      os.pwrite(fd, (json.dumps(me) + '\n').encode(), 0)
      os.fsync(fd)
    except OSError as e:   # a full disk: no empty lock file is left behind
      with contextlib.suppress(OSError):
        os.unlink(self.path)
      os.close(fd)
      raise RunFolderError(f'cannot write the lock {self.path}: {e.strerror or e}') from None
    return fd

  def _in_use(self, holder: Optional[dict]) -> RunFolderError:
    return RunFolderError(f'{os.path.dirname(self.path)} is in use by another trainer '
                          f'({_who(holder)}); stop it or choose another --config.workdir')

  def release(self) -> None:
    """Removes the lock file and drops the flock; safe to call twice."""
    if self._fd is None:
      return
    try:
      os.unlink(self.path)
    except FileNotFoundError:
      pass
    os.close(self._fd)
    self._fd = None


def _read_holder(fd: int) -> Optional[dict]:
  try:
    text = os.pread(fd, 4096, 0).decode(errors='replace').strip()
    return json.loads(text) if text else None
  except (OSError, ValueError):
    return None


def _who(holder: Optional[dict]) -> str:
  if not holder:
    return 'holder unknown'
  return f'host {holder.get("host")}, pid {holder.get("pid")}, since {holder.get("started")}'


def describe_stale(holder: dict) -> str:
  """A note naming the holder of a stale lock taken over."""
  return f'took over the lock left by a stopped trainer ({_who(holder)})'
