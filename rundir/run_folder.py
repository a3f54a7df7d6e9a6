"""The run folder (`run.workdir`, docs/run_folder.md): readied for training (`prepare`, then `adopt`
once the checkpoint is restored) and read back. Every failure is a one-line `RunFolderError`
(exit status 2)."""

import gzip
import json
import os
import zlib
from typing import Dict, List, NamedTuple, Optional, Tuple

from agents import checkpoint
from configs import common
from configs import resume
from infra import multihost
from rundir import earlier_run
from rundir import folder_guard

# The guards (rundir/folder_guard.py) are part of the folder's API.
LOCK_FILE, RunFolderError, RunLock = (folder_guard.LOCK_FILE, folder_guard.RunFolderError,
                                      folder_guard.RunLock)
check_path_length, check_usable = folder_guard.check_path_length, folder_guard.check_usable
describe_stale = folder_guard.describe_stale


class ConfigFileError(RunFolderError, ValueError):
  """An unreadable config.json; a ValueError too, so a reading tool reports it as bad input."""

CONFIG_FILE = 'config.json'
METRICS_FILE = 'metrics.jsonl'


def resolve_workdir(run) -> str:
  """run.workdir, or runs/<config_name or 'run'>-<YYYYmmdd-HHMMSS> when that is empty."""
  return run.workdir or common.default_workdir(run.config_name)


def config_path(workdir: str) -> str:
  return os.path.join(workdir, CONFIG_FILE)


def metrics_path(workdir: str) -> str:
  return os.path.join(workdir, METRICS_FILE)


def read_config(workdir: str) -> Optional[dict]:
  """config.json as a dict (resume.migrate'd); None without one, ConfigFileError if unreadable."""
  path = config_path(workdir)
  if not os.path.isfile(path):
    return None
  try:
    with open(path) as f:
      return resume.migrate(json.load(f))
  except (OSError, ValueError) as e:
    raise ConfigFileError(f'cannot read {path} ({e})') from None


def check_resume(workdir: str, source: Dict) -> List[Tuple]:
  """Checks a resume's config (a RunSpec's source) against the saved config.json (configs.resume
  decides which fields are frozen). Writes nothing.

  Returns:
    The allowed changes, (field, saved, new) each; [] without a saved config.

  Raises:
    RunFolderError: naming every frozen field that differs (network, tasks,
      shapes), a saved value of the wrong kind, or an unreadable config.json.
  """
  try:
    saved = read_config(workdir)
  except ConfigFileError as e:
    raise RunFolderError(f'{e}; the run cannot be checked for resuming. Restore it or choose '
                         'another --config.workdir') from None
  if saved is None:
    return []
  frozen, allowed = resume.compare(saved, source)
  wrong = resume.mistyped(frozen + allowed)
  if wrong:
    field, value, kind = wrong[0]
    raise RunFolderError(
        f'cannot resume {workdir}: its {CONFIG_FILE} has {field} {json.dumps(value)}, where '
        f'{kind} belongs (edited by hand?). Correct it in {config_path(workdir)}, or choose '
        'another --config.workdir')
  if frozen:
    raise RunFolderError(
        f'cannot resume {workdir} with a different network, tasks or shapes: '
        f'{resume.describe(frozen)}. Undo these overrides, or choose another --config.workdir')
  return allowed


def keep_previous_config(workdir: str, step: int) -> Optional[str]:
  """Copies config.json to config.<step>.json (an existing copy is kept) before
  a resume rewrites it; returns the copy's path, or None without config.json."""
  src = config_path(workdir)
  if not os.path.isfile(src):
    return None
  dst = os.path.join(workdir, f'config.{step}.json')
  if not os.path.exists(dst):
    with open(src) as f, open(dst, 'w') as g:
      g.write(f.read())
  return dst


def set_aside_metrics(workdir: str, step: int) -> Tuple[int, Optional[str]]:
  """Moves the metrics.jsonl rows logged past `step` (the restored checkpoint)
  to metrics.after-<step>.jsonl; returns (rows moved, side file or None).

  Lines that are not JSON objects (not UTF-8 text either) or whose env_steps is not a number
  (cut by a kill) move too; an object without env_steps counts as step 0. Both files fsynced;
  metrics.jsonl replaced atomically.
  """
  path = metrics_path(workdir)
  if not os.path.isfile(path):
    return 0, None
  with open(path, 'rb') as f:   # bytes: a cut write may leave bytes that are not UTF-8
    lines = f.readlines()
  keep, moved = [], []
  for line in lines:
    try:
      record = json.loads(line)
    except ValueError:  # a line cut by the kill (UnicodeDecodeError too): not a record
      record = None
    env_steps = record.get('env_steps', 0) if isinstance(record, dict) else None
    if isinstance(env_steps, bool) or not isinstance(env_steps, (int, float)) \
        or env_steps != env_steps:  # not a record, or its env_steps not a number (NaN too)
      moved.append(line if line.endswith(b'\n') else line + b'\n')
      continue
    (moved if env_steps > step else keep).append(line)
  if not moved:
    return 0, None
  side = os.path.join(workdir, f'metrics.after-{step}.jsonl')
  with open(side, 'ab') as f:
    f.writelines(moved)
    f.flush()
    os.fsync(f.fileno())
  tmp = path + '.tmp'
  with open(tmp, 'wb') as f:
    f.writelines(keep)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)
  return len(moved), side


def adopt(workdir: str, step: Optional[int], allowed: List[Tuple]) -> List[str]:
  """Adopts a run folder once its checkpoint is restored; process 0 only.

  For a resume (`step`): set_aside_metrics, and keep_previous_config when
  `allowed` fields changed. For a new run (None): an earlier run's files move
  to earlier_run.<n>/. Returns lines to print; RunFolderError on failure.
  """
  notes = []
  try:
    if step is None:
      moved = earlier_run.set_aside(workdir)
      return [earlier_run.describe(workdir, moved)] if moved else []
    moved_rows, side = set_aside_metrics(workdir, step)
    if moved_rows:
      notes.append(f'{moved_rows} metrics rows logged after env step {step:,} (no '
                   f'checkpoint holds them) moved to {side}')
    if allowed:
      kept = keep_previous_config(workdir, step)
      notes.append(f'resuming with changed {resume.describe(allowed)} (the config before '
                   f'is kept in {kept})')
  except (OSError, ValueError) as e:
    raise RunFolderError(
        f'cannot prepare {workdir} for training: {type(e).__name__}: {e}') from None
  return notes


def read_metrics(workdir: str) -> List[Dict]:
  """The rows of a run's metrics.jsonl (or an archived metrics.jsonl.gz), in file order.

  A resumed run's rows are all included (analysis/run_metrics.stitch_resumed drops the replaced
  ones). A last line that is not UTF-8 text, or without its newline and not JSON, is a row a live
  run is writing or a kill cut, and is left out.

  Raises:
    FileNotFoundError: without either file.
    ValueError: a line that is not a JSON row or not UTF-8 text (file and
      line number), or a .gz that is cut off or damaged.
  """
  path = metrics_path(workdir)
  if os.path.exists(path):
    opener = open
  elif os.path.exists(path + '.gz'):
    path, opener = path + '.gz', gzip.open
  else:
    raise FileNotFoundError(f'{workdir} has no {METRICS_FILE}')
  rows = []
  number = 0
  try:
    with opener(path, 'rb') as f:
      lines = f.read().splitlines(keepends=True)
    for number, raw in enumerate(lines, 1):
      try:
        line = raw.decode('utf-8')
      except UnicodeDecodeError:
        if number == len(lines) and opener is open:
          break   # a last row a kill cut: unfinished
        raise ValueError(f'{path} line {number} is not UTF-8 text: {raw.strip()[:60]!r}') from None
      if line.strip():
        try:
          rows.append(json.loads(line))
        except ValueError:
          if not line.endswith('\n') and opener is open:
            break   # the row being written; the file ends here
          raise ValueError(f'{path} line {number} is not a JSON metrics row: '
                           f'{line.strip()[:60]!r}') from None
  except (EOFError, OSError, zlib.error) as e:   # gzip: cut off, or not gzip at all
    if opener is open:
      raise
    raise ValueError(f'{path} is cut off or damaged after line {number} '
                     f'({type(e).__name__}: {e})') from None
  return rows


class Prepared(NamedTuple):
  """A run folder readied for training by `prepare`."""
  workdir: str
  lock: Optional[RunLock]       # held by process 0; None on the others
  resume_step: Optional[int]    # the newest intact checkpoint's env step; None: a new run
  notes: List[str]              # lines to print (a stale lock taken over, checkpoints set aside)
  allowed: List[Tuple]          # the config changes a resume may make: (field, saved, new)


def prepare(spec) -> Prepared:
  """Readies the run folder of a RunSpec for training; its workdir is process
  0's (run.workdir, or the one resolve_workdir gives) on every process.

  Process 0 checks the folder, takes its lock, checks a resume against the saved config (nothing but
  the lock is written before that passes), finds the newest intact checkpoint and sets damaged newer
  ones aside. Its verdict reaches every process, so a RunFolderError stops all alike
  (the lock released). The rest waits for the restore: `adopt`.

  Raises:
    RunFolderError: the folder cannot be used or is locked, a resume changes
      frozen fields, or every checkpoint is damaged.
  """
  workdir = multihost.allgather_json(resolve_workdir(spec.run))[0]
  lock, notes, problem, step, allowed = None, [], None, None, []
  if multihost.is_primary():
    try:
      check_usable(workdir)
      lock = RunLock(workdir).acquire()
      if lock.stale_holder:
        notes.append(describe_stale(lock.stale_holder))
      step, damaged = checkpoint.find_intact(workdir)
      if step is not None or damaged:
        allowed = check_resume(workdir, {**spec.source, 'workdir': workdir})
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
  """A JSON-lines file's rows, skipping lines not JSON or not UTF-8 (a writer's torn line)."""
  rows = []
  with open(path, 'rb') as f:
    for line in f:
      try:
        rows.append(json.loads(line))
      except ValueError:
        continue
  return rows
