"""A finished run's record, small enough to keep in git: config.json,
metrics.jsonl.gz and eval/*.json (`launch/archive_run.py`).
analysis/run_metrics.load_metrics reads an archive as it reads a run folder."""

import glob
import gzip
import os
import shutil
import sys
from typing import List

from rundir import run_folder

METRICS, CONFIG, EVAL = run_folder.METRICS_FILE, run_folder.CONFIG_FILE, 'eval'


class ArchiveError(RuntimeError):
  """A run that cannot be archived, said in one line."""


def _inside(path: str, folder: str) -> bool:
  """Whether `path` is `folder` or lies under it (real paths)."""
  path, folder = os.path.realpath(path), os.path.realpath(folder)
  return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def archive(workdir: str, dest: str, overwrite: bool = False) -> List[str]:
  """Writes a run folder's record to the archive folder `dest`.

  Guarantees: the run folder's lock is held while it is copied (a run still training is refused);
  the archive is built in `<dest>.partial` and moved into place, so it appears whole or not at all;
  the gzip header carries no time or name, so the same run archives to the same bytes.

  Args:
    dest: must lie outside the run folder and not hold it.
    overwrite: replace a `dest` that exists and is not empty.

  Returns:
    The files written, relative to `dest`, sorted.

  Raises:
    ArchiveError: one line, for any of the cases above, a run folder without
      metrics.jsonl or a readable config.json, or a failed write.
  """
  for name in (METRICS, CONFIG):
    if not os.path.isfile(os.path.join(workdir, name)):
      raise ArchiveError(f'{workdir} has no {name}: not a run folder, or the run never started')
  if _inside(dest, workdir) or _inside(workdir, dest):
    raise ArchiveError(f'the archive {dest} must lie outside the run folder {workdir} and not '
                       'hold it (--overwrite replaces the whole archive folder)')
  if os.path.exists(dest):
    if not os.path.isdir(dest):
      raise ArchiveError(f'{dest} is a file, not a folder')
    if os.listdir(dest) and not overwrite:
      raise ArchiveError(f'{dest} exists and is not empty; give --overwrite to replace it')
  try:
    run_folder.read_config(workdir)   # an archive must read back as its run did
  except run_folder.ConfigFileError as e:
    raise ArchiveError(f'{e}; not archived') from None
  lock = run_folder.RunLock(workdir)
  tmp = os.path.normpath(dest) + '.partial'
  try:   # the lock is released whatever happens once it is taken
    try:
      lock.acquire()
    except run_folder.RunFolderError as e:
      if 'in use' in str(e):
        raise ArchiveError(str(e).split(';')[0] + '; archive it once that run has stopped') \
            from None
      raise ArchiveError(f'{e}; not archived') from None   # a full disk
    if lock.stale_holder:
      print(f'archive_run: {workdir} was stopped without finishing '
            f'({run_folder.describe_stale(lock.stale_holder)}); archived as it is',
            file=sys.stderr)
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, EVAL))
    with open(os.path.join(workdir, METRICS), 'rb') as src, \
        open(os.path.join(tmp, METRICS + '.gz'), 'wb') as raw, \
        gzip.GzipFile(filename='', mode='wb', fileobj=raw, mtime=0) as out:
      shutil.copyfileobj(src, out)
    shutil.copyfile(os.path.join(workdir, CONFIG), os.path.join(tmp, CONFIG))
    for path in sorted(glob.glob(os.path.join(glob.escape(workdir), EVAL, '*.json'))):
      shutil.copyfile(path, os.path.join(tmp, EVAL, os.path.basename(path)))
    if not os.listdir(os.path.join(tmp, EVAL)):
      os.rmdir(os.path.join(tmp, EVAL))
    old = None
    if os.path.exists(dest):  # kept until the new archive is in place
      old = os.path.normpath(dest) + '.old'
      shutil.rmtree(old, ignore_errors=True)
      os.replace(dest, old)
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    os.replace(tmp, dest)   # the archive appears whole or not at all
    if old:
      shutil.rmtree(old)
  except OSError as e:
    shutil.rmtree(tmp, ignore_errors=True)
    raise ArchiveError(f'cannot write the archive {dest}: {e.strerror or e}') from None
  finally:
    lock.release()
  return sorted(os.path.relpath(p, dest) for p in glob.glob(os.path.join(glob.escape(dest), '**', '*'),
                                                          recursive=True) if os.path.isfile(p))
