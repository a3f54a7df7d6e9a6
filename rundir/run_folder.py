"""The run folder: what is in it, how it is readied for training, how it is read.

A run folder (`config.workdir`) holds config.json (the config of the run,
written at its start; config.<step>.json: the one before a resume changed
it), metrics.jsonl (one JSON row per log step), checkpoints/ (agents/
checkpoint.py), run.lock, wandb's and TensorBoard's files
(rundir/run_logger.py writes them) and eval/ (launch/evaluate.py).

- `prepare(config)`: everything before training, called once by
  launch/train.py (and per member by launch/pbt.py): the folder resolved,
  usable, locked, a resume checked against the saved config, damaged
  checkpoints set aside; with several processes, process 0's verdict
  reaches every process.
- `adopt(...)`: once the checkpoint restored, metrics past it set aside and
  the previous config kept.
- Readers: `read_config(workdir)` (config.json as a dict),
  `read_metrics(workdir)` (metrics.jsonl rows, or an archived .gz).

The guarantees, one by one:
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

import datetime
import fcntl
import gzip
import json
import os
import socket
import time
from typing import Dict, List, NamedTuple, Optional, Tuple

from agents import checkpoint
from configs import resume
from infra import multihost

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
  """Checks that the filesystem takes the paths a run writes in a folder.

  The limits are those of the nearest existing folder on the path (255 and
  4096 where the filesystem does not say). Writes nothing.

  Args:
    workdir: the run folder (it need not exist).

  Raises:
    RunFolderError: when a name in the path is longer than the filesystem's
      NAME_MAX, or the whole path too long to leave INNER_PATH_ROOM bytes
      under PATH_MAX; the message says to choose a shorter --config.workdir.
  """
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
  """Makes sure a run folder exists and can be written, creating it if needed.

  Args:
    workdir: the run folder.

  Raises:
    RunFolderError: when it is a file, cannot be created or written, or its
      path is too long for the files a run writes in it
      (check_path_length).
  """
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

  The lock file holds one JSON line {'host', 'pid', 'started' ('%Y-%m-%d
  %H:%M:%S')}. After `acquire`, `stale_holder` is the holder record of a
  stale lock that was taken over, else None.

  Args:
    workdir: the run folder.
  """

  def __init__(self, workdir: str):
    self.path = os.path.join(workdir, LOCK_FILE)
    self._fd: Optional[int] = None
    self.stale_holder: Optional[dict] = None

  def acquire(self) -> 'RunLock':
    """Takes the lock without waiting and writes this process into the lock file.

    Returns:
      self.

    Raises:
      RunFolderError: when another live trainer holds it ('<workdir> is in
        use by another trainer (host ..., pid ..., since ...)'), the lock
        file cannot be created, or it keeps being replaced (10 tries).
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
  """A note for a stale lock taken over, naming its holder (RunLock.stale_holder)."""
  return f'took over the lock left by a stopped trainer ({_who(holder)})'


def resolve_workdir(config) -> str:
  """The run folder of a config.

  Args:
    config: the run config.

  Returns:
    config.workdir, or runs/<config_name>-<YYYYmmdd-HHMMSS> ('run' for a
    config without a name) when it is empty.
  """
  if config.workdir:
    return config.workdir
  stamp = datetime.datetime.now().strftime('%Y%m%d-%H%M%S')
  return os.path.join('runs', f'{config.config_name or "run"}-{stamp}')


def config_path(workdir: str) -> str:
  """<workdir>/config.json."""
  return os.path.join(workdir, CONFIG_FILE)


def metrics_path(workdir: str) -> str:
  """<workdir>/metrics.jsonl."""
  return os.path.join(workdir, METRICS_FILE)


def read_config(workdir: str) -> Optional[dict]:
  """A run folder's config.json as written at the run's start.

  Args:
    workdir: the run folder.

  Returns:
    The config as a dict, or None where there is no config.json.

  Raises:
    RunFolderError: when it cannot be read or is not JSON.
  """
  path = config_path(workdir)
  if not os.path.isfile(path):
    return None
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError) as e:
    raise RunFolderError(f'cannot read {path} ({e}); the run cannot be checked for resuming. '
                         'Restore it or choose another --config.workdir') from None


def check_resume(workdir: str, config) -> List[Tuple]:
  """Checks a resume's config against the run folder's saved config.json.

  Called for a run folder with checkpoints; configs.resume decides which
  fields are frozen. Writes nothing.

  Args:
    workdir: the run folder.
    config: the new run config.

  Returns:
    The allowed changes, (field, saved, new) each; [] without a saved config.

  Raises:
    RunFolderError: naming every frozen field that differs from the saved
      config (a network, task or shape change) and its saved value; or when
      config.json cannot be read.
  """
  saved = read_config(workdir)
  if saved is None:
    return []
  frozen, allowed = resume.compare(saved, config)
  if frozen:
    raise RunFolderError(
        f'cannot resume {workdir} with a different network, tasks or shapes: '
        f'{resume.describe(frozen)}. Undo these overrides, or choose another --config.workdir')
  return allowed


def keep_previous_config(workdir: str, step: int) -> Optional[str]:
  """Keeps the config that trained up to a step, before a resume rewrites config.json.

  Copies config.json to config.<step>.json; an existing copy is left as it
  is.

  Args:
    workdir: the run folder.
    step: the env step of the restored checkpoint.

  Returns:
    The copy's path, or None when there is no config.json.
  """
  src = config_path(workdir)
  if not os.path.isfile(src):
    return None
  dst = os.path.join(workdir, f'config.{step}.json')
  if not os.path.exists(dst):
    with open(src) as f, open(dst, 'w') as g:
      g.write(f.read())
  return dst


def set_aside_metrics(workdir: str, step: int) -> Tuple[int, Optional[str]]:
  """Moves the metrics.jsonl rows logged past a step to a side file.

  Rows past `step` were written after the restored checkpoint by a process
  that stopped without saving; they go to metrics.after-<step>.jsonl
  (appended if it exists, fsynced), and metrics.jsonl is rewritten with the
  rest, in order, through a temporary file. A line that is not a JSON object,
  or whose env_steps is not a number (`"x"`, null, NaN: cut by a kill, or
  edited by hand), is moved too; an object without env_steps counts as env
  step 0 and stays.

  Args:
    workdir: the run folder.
    step: the env step of the restored checkpoint (0 for a new run).

  Returns:
    (rows moved, side file path or None when nothing moved or there is no
    metrics.jsonl).
  """
  path = metrics_path(workdir)
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
  """Adopts a run folder once its checkpoint is restored; process 0 only.

  A resume writes nothing before the restore. Moves the metrics rows logged
  past `step` to a side file (set_aside_metrics) and, when allowed fields
  changed, keeps the previous config.json (keep_previous_config).

  Args:
    workdir: the run folder.
    step: the restored checkpoint's env step; None: a new run.
    allowed: the allowed config changes (check_resume).

  Returns:
    Lines to print: the rows moved and where, the changed fields and where
    the previous config is.

  Raises:
    RunFolderError: when the folder cannot be prepared ('cannot prepare
      <workdir> for training: ...').
  """
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


def read_metrics(workdir: str) -> List[Dict]:
  """The rows of a run's metrics file, as logged.

  A resumed run's rows are all included (analysis/run_metrics.stitch_resumed
  drops the ones a resume replaced). Reads metrics.jsonl, or an archived
  run's metrics.jsonl.gz (docs/data/ keeps the documented runs' that way);
  blank lines are skipped.

  Args:
    workdir: a run folder or an archive of one.

  Returns:
    The rows, each a dict, in file order.

  Raises:
    FileNotFoundError: without either file.
    ValueError: naming the file and line number of a line that is not a
      JSON row.
  """
  path = metrics_path(workdir)
  if os.path.exists(path):
    opener = open
  elif os.path.exists(path + '.gz'):
    path, opener = path + '.gz', gzip.open
  else:
    raise FileNotFoundError(f'{workdir} has no {METRICS_FILE}')
  rows = []
  with opener(path, 'rt') as f:
    for number, line in enumerate(f, 1):
      if line.strip():
        try:
          rows.append(json.loads(line))
        except ValueError:
          raise ValueError(f'{path} line {number} is not a JSON metrics row: '
                           f'{line.strip()[:60]!r}') from None
  return rows


class Prepared(NamedTuple):
  """A run folder readied for training by `prepare`."""
  workdir: str
  lock: Optional[RunLock]       # held by process 0; None on the others
  resume_step: Optional[int]    # the newest intact checkpoint's env step; None: a new run
  notes: List[str]              # lines to print (a stale lock taken over, checkpoints set aside)
  allowed: List[Tuple]          # the config changes a resume may make: (field, saved, new)


def prepare(config) -> Prepared:
  """Readies the run folder of a config for training.

  Sets config.workdir to the folder (process 0's, on every process).
  Process 0 checks the folder is usable, takes its lock, checks a resume
  against the saved config (nothing but the lock is written before that
  passes), finds the newest intact checkpoint and sets damaged newer ones
  aside. Its verdict reaches every process: a RunFolderError stops all of
  them alike, and the lock is released. What a resume changes besides
  (metrics rows, the previous config) waits for the restore: `adopt`.

  Args:
    config: the run config.

  Returns:
    A Prepared: the folder, the lock (process 0), the resume step, notes and
    the allowed config changes.

  Raises:
    RunFolderError: when the folder cannot be used, is locked by another
      trainer, a resume changes frozen fields, or every checkpoint is
      damaged; OSError and ValueError while preparing are reported as one.
  """
  with config.unlocked():
    # Every process writes to and resumes from process 0's run folder.
    config.workdir = multihost.allgather_json(resolve_workdir(config))[0]
  workdir, lock, notes, problem, step, allowed = config.workdir, None, [], None, None, []
  if multihost.is_primary():
    try:
      check_usable(workdir)
      lock = RunLock(workdir).acquire()
      if lock.stale_holder:
        notes.append(describe_stale(lock.stale_holder))
      step, damaged = checkpoint.find_intact(workdir)
      if step is not None or damaged:
        allowed = check_resume(workdir, config)
      if damaged and step is None:
        bad_step, what = damaged[0]
        raise RunFolderError(
            f'every checkpoint in {checkpoint.directory(workdir)} is damaged (the latest, at env '
            f'step {bad_step:,}: {what}); nothing to resume from. Choose another '
            '--config.workdir, or move that checkpoints folder away to start afresh here')
      for bad_step, what in damaged:
        moved = checkpoint.set_aside(workdir, bad_step)
        notes.append(f'the checkpoint at env step {bad_step:,} is damaged ({what}); moved to '
                     f'{moved}')
      if damaged:
        notes.append(f'resuming from the newest intact checkpoint, at env step {step:,}')
    except (RunFolderError, OSError, ValueError) as e:
      if lock is not None:
        lock.release()
      lock = None
      problem = (str(e) if isinstance(e, RunFolderError) else
                 f'cannot prepare {workdir} for training: {type(e).__name__}: {e}')
  if multihost.is_multiprocess():
    problem, step = multihost.allgather_json([problem, step])[0]
  if problem is not None:
    raise RunFolderError(problem)
  return Prepared(workdir, lock, step, notes, allowed)


def read_jsonl(path: str) -> List[Dict]:
  """The rows of a JSON-lines file.

  Lines that are not JSON (a torn last line of a killed writer) are skipped.

  Args:
    path: the file.

  Returns:
    The decoded rows, in file order.

  Raises:
    OSError: when the file cannot be read.
  """
  rows = []
  with open(path) as f:
    for line in f:
      try:
        rows.append(json.loads(line))
      except ValueError:
        continue
  return rows
