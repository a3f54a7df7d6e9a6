"""A run folder's guarantees before training starts: usable, one writer,
a resume that matches, metrics that match the checkpoint.

- `check_usable(workdir)`: the folder is (or can be made) a writable folder.
- `RunLock`: `<workdir>/run.lock`, held (flock) by the one process that
  writes the folder; a second trainer on the folder stops naming the
  holder's host and pid; a lock left by a dead process is taken over.
- `check_resume(workdir, config)`: the saved config.json against the new
  config; a network, task or shape change stops the run before anything is
  written.
- `set_aside_metrics(workdir, step)`: metrics.jsonl rows past the restored
  checkpoint go to a side file, so the file stays monotone in env steps.

Every failure here is a `RunFolderError`: one line, exit status 2.
"""

import fcntl
import json
import os
import socket
import time
from typing import List, Optional, Tuple

from configs import resume

LOCK_FILE = 'run.lock'
CONFIG_FILE = 'config.json'
METRICS_FILE = 'metrics.jsonl'


class RunFolderError(RuntimeError):
  """The run folder cannot be used as asked; the message is one line."""


# Room for the longest path a run writes inside its folder: orbax's temporary
# checkpoint folders and data files (checkpoints/<step>.orbax-checkpoint-tmp-
# <time>/default/ocdbt.process_0/d/<32 hex>), set-aside copies, TensorBoard's
# event files: about 150 bytes; twice that to be safe.
INNER_PATH_ROOM = 300


def check_path_length(workdir: str) -> None:
  """RunFolderError if the filesystem would refuse the paths a run writes in
  `workdir`: a name in it longer than the filesystem's NAME_MAX, or the
  whole path too long to leave INNER_PATH_ROOM under PATH_MAX. (Before:
  a 4,000-character path was accepted, and the first checkpoint failed.)"""
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
  """Creates `workdir` if needed; RunFolderError if it is a file, cannot be
  written, or its path is too long for the files a run writes in it."""
  check_path_length(workdir)
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
  """The one-writer lock of a run folder.

  An flock on `<workdir>/run.lock`, which also holds the holder's host, pid
  and start time. The kernel drops an flock when its process dies (also by
  kill -9), so a lock file whose flock nobody holds is stale and is taken
  over. Where flock is not supported (some network filesystems), the
  recorded pid is checked instead on the same host.
  """

  def __init__(self, workdir: str):
    self.path = os.path.join(workdir, LOCK_FILE)
    self._fd: Optional[int] = None
    self.stale_holder: Optional[dict] = None

  def acquire(self) -> 'RunLock':
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
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(me) + '\n').encode(), 0)
    os.fsync(fd)
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
  return f'took over the lock left by a stopped trainer ({_who(holder)})'


def saved_config(workdir: str) -> Optional[dict]:
  path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.isfile(path):
    return None
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError) as e:
    raise RunFolderError(f'cannot read {path} ({e}); the run cannot be checked for resuming. '
                         'Restore it or choose another --config.workdir') from None


def check_resume(workdir: str, config) -> List[Tuple]:
  """For a run folder with checkpoints: RunFolderError naming every frozen
  field that differs from the saved config (and its saved value); returns
  the allowed changes (field, saved, new). Writes nothing."""
  saved = saved_config(workdir)
  if saved is None:
    return []
  frozen, allowed = resume.compare(saved, config)
  if frozen:
    raise RunFolderError(
        f'cannot resume {workdir} with a different network, tasks or shapes: '
        f'{resume.describe(frozen)}. Undo these overrides, or choose another --config.workdir')
  return allowed


def keep_previous_config(workdir: str, step: int) -> Optional[str]:
  """Copies config.json to config.<step>.json (the config that trained up to
  `step`) before a resume with changed fields rewrites it; returns the path."""
  src = os.path.join(workdir, CONFIG_FILE)
  if not os.path.isfile(src):
    return None
  dst = os.path.join(workdir, f'config.{step}.json')
  if not os.path.exists(dst):
    with open(src) as f, open(dst, 'w') as g:
      g.write(f.read())
  return dst


def set_aside_metrics(workdir: str, step: int) -> Tuple[int, Optional[str]]:
  """Moves metrics.jsonl rows logged past env step `step` (written after the
  restored checkpoint by a process that stopped without saving) to
  metrics.after-<step>.jsonl, appending if it exists; keeps the rest in
  place. A line that is not a JSON object, or whose env_steps is not a
  number (`"x"`, null, NaN: cut by a kill, or edited by hand), is moved
  too; an object without env_steps counts as env step 0 and stays. Returns (rows moved,
  side file or None)."""
  path = os.path.join(workdir, METRICS_FILE)
  if not os.path.isfile(path):
    return 0, None
  with open(path) as f:
    lines = f.readlines()
  keep, moved = [], []
  for line in lines:
    try:
      record = json.loads(line)
    except ValueError:  # a line cut by the kill: not a record
      record = None
    env_steps = record.get('env_steps', 0) if isinstance(record, dict) else None
    if isinstance(env_steps, bool) or not isinstance(env_steps, (int, float)) \
        or env_steps != env_steps:  # not a record, or its env_steps not a number (NaN too)
      moved.append(line if line.endswith('\n') else line + '\n')
      continue
    (moved if env_steps > step else keep).append(line)
  if not moved:
    return 0, None
  side = os.path.join(workdir, f'metrics.after-{step}.jsonl')
  with open(side, 'a') as f:
    f.writelines(moved)
    f.flush()
    os.fsync(f.fileno())
  tmp = path + '.tmp'
  with open(tmp, 'w') as f:
    f.writelines(keep)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)
  return len(moved), side


def adopt(workdir: str, step: Optional[int], allowed: List[Tuple]) -> List[str]:
  """Process 0, once the checkpoint at `step` (None: a new run) restored (a
  resume writes nothing before that): moves metrics rows logged past it to
  a side file and keeps the previous config.json when allowed fields
  changed; returns lines to print."""
  notes = []
  try:
    moved_rows, side = set_aside_metrics(workdir, step or 0)
    if moved_rows:
      notes.append(f'{moved_rows} metrics rows logged after env step {step or 0:,} (no '
                   f'checkpoint holds them) moved to {side}')
    if allowed and step is not None:
      kept = keep_previous_config(workdir, step)
      notes.append(f'resuming with changed {resume.describe(allowed)} (the config before '
                   f'is kept in {kept})')
  except (OSError, ValueError) as e:
    raise RunFolderError(
        f'cannot prepare {workdir} for training: {type(e).__name__}: {e}') from None
  return notes
