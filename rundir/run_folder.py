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
  the previous config kept; for a new run, an earlier run's files moved to
  earlier_run.<n>/ (rundir/earlier_run.py).
- Readers: `read_config(workdir)` (config.json as a dict),
  `read_metrics(workdir)` (metrics.jsonl rows, or an archived .gz).

The guarantees, one by one:
- `check_usable(workdir)` (rundir/folder_guard.py): the folder is (or can
  be made) a writable folder, its path short enough for what a run writes.
- `RunLock` (rundir/folder_guard.py): `<workdir>/run.lock`, held (flock) by
  the one process that writes the folder; a second trainer on the folder
  stops naming the holder's host and pid; a lock left by a dead process is
  taken over.
- `check_resume(workdir, config)`: the saved config.json against the new
  config; a network, task or shape change stops the run before anything is
  written.
- `set_aside_metrics(workdir, step)`: metrics.jsonl rows past the restored
  checkpoint go to a side file, so the file stays monotone in env steps.

Every failure here is a `RunFolderError`: one line, exit status 2.
"""

import datetime
import gzip
import json
import os
import zlib
from typing import Dict, List, NamedTuple, Optional, Tuple

from agents import checkpoint
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
  """A run folder's config.json that cannot be read or is not JSON; a
  ValueError too, so a reading tool reports it as bad input in one line."""

CONFIG_FILE = 'config.json'
METRICS_FILE = 'metrics.jsonl'


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
    ConfigFileError: when it cannot be read or is not JSON, naming it.
  """
  path = config_path(workdir)
  if not os.path.isfile(path):
    return None
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError) as e:
    raise ConfigFileError(f'cannot read {path} ({e})') from None


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
      config (a network, task or shape change) and its saved value; a saved
      value of the wrong kind (a string where a number belongs); or when
      config.json cannot be read.
  """
  try:
    saved = read_config(workdir)
  except ConfigFileError as e:
    raise RunFolderError(f'{e}; the run cannot be checked for resuming. Restore it or choose '
                         'another --config.workdir') from None
  if saved is None:
    return []
  frozen, allowed = resume.compare(saved, config)
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
  changed, keeps the previous config.json (keep_previous_config). A new run
  (no checkpoint) in a folder that holds an earlier run's files moves them,
  config and wandb id included, to earlier_run.<n>/ (rundir/earlier_run.py).

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
  """The rows of a run's metrics file, as logged.

  A resumed run's rows are all included (analysis/run_metrics.stitch_resumed
  drops the ones a resume replaced). Reads metrics.jsonl, or an archived
  run's metrics.jsonl.gz (docs/data/ keeps the documented runs' that way);
  blank lines are skipped. A last line without its newline that is not yet
  a JSON row is the row a live run is writing: it is left out.

  Args:
    workdir: a run folder or an archive of one.

  Returns:
    The rows, each a dict, in file order.

  Raises:
    FileNotFoundError: without either file.
    ValueError: naming the file and line number of a line that is not a
      JSON row, or naming a metrics.jsonl.gz that is cut off or damaged.
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
    with opener(path, 'rt') as f:
      for number, line in enumerate(f, 1):
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
