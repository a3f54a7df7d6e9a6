"""rundir/archive.py: a run's record without its checkpoints, read back as the run."""

import errno
import json
import os

import pytest

from analysis import run_metrics
from rundir import archive
from rundir import run_folder


def _run(tmp_path):
  run = tmp_path / 'run'
  (run / 'eval').mkdir(parents=True)
  (run / 'checkpoints' / '1000').mkdir(parents=True)
  (run / 'checkpoints' / '1000' / 'params').write_bytes(b'\0' * 1000)
  (run / 'wandb').mkdir()
  rows = [{'env_steps': 500, 'time': 1.0, 'episode_return/Pong': -21.0},
          {'env_steps': 1000, 'time': 2.0, 'episode_return/Pong': -20.0}]
  (run / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
  (run / 'config.json').write_text(json.dumps({'tasks': [{'name': 'Pong'}]}))
  (run / 'eval' / '1000.json').write_text(json.dumps({'env_steps': 1000}))
  return run


def test_archive_holds_the_record_and_reads_back_as_the_run(tmp_path):
  run = _run(tmp_path)
  dest = tmp_path / 'docs' / 'data' / 'run'
  written = archive.archive(str(run), str(dest))
  assert written == ['config.json', 'eval/1000.json', 'metrics.jsonl.gz']
  assert not (dest / 'checkpoints').exists() and not (dest / 'wandb').exists()
  original, archived = run_metrics.load_metrics(str(run)), run_metrics.load_metrics(str(dest))
  assert archived.records == original.records and archived.config == original.config
  assert not (run / run_folder.LOCK_FILE).exists()   # the lock is released
  first = (dest / 'metrics.jsonl.gz').read_bytes()
  archive.archive(str(run), str(dest), overwrite=True)
  assert (dest / 'metrics.jsonl.gz').read_bytes() == first   # no time in the gzip header


def test_refusals_are_one_line_and_write_nothing(tmp_path):
  run = _run(tmp_path)
  dest = tmp_path / 'archive'
  with pytest.raises(archive.ArchiveError, match='no metrics.jsonl'):
    archive.archive(str(tmp_path / 'empty'), str(dest))
  lock = run_folder.RunLock(str(run)).acquire()   # a trainer still at work
  try:
    with pytest.raises(archive.ArchiveError, match='in use'):
      archive.archive(str(run), str(dest))
  finally:
    lock.release()
  assert not dest.exists() and not os.path.exists(str(dest) + '.partial')
  archive.archive(str(run), str(dest))
  with pytest.raises(archive.ArchiveError, match='--overwrite'):
    archive.archive(str(run), str(dest))
  (tmp_path / 'a_file').write_text('x')
  with pytest.raises(archive.ArchiveError, match='is a file'):
    archive.archive(str(run), str(tmp_path / 'a_file'))


@pytest.mark.parametrize('where', ['run', 'run/eval', '.', 'run/../run/'])
def test_overwrite_never_touches_the_run_folder(tmp_path, where):
  # --overwrite replaces the archive folder: one that is, holds or lies in the run is refused.
  run = _run(tmp_path)
  before = sorted(str(p) for p in run.rglob('*'))
  with pytest.raises(archive.ArchiveError, match='must lie outside the run folder'):
    archive.archive(str(run), str(tmp_path / where), overwrite=True)
  assert sorted(str(p) for p in run.rglob('*')) == before


def test_a_config_json_that_is_not_json_is_not_archived(tmp_path):
  run = _run(tmp_path)
  (run / 'config.json').write_text('{"tasks": [')   # cut off
  dest = tmp_path / 'archive'
  with pytest.raises(archive.ArchiveError, match=r'cannot read .*config.json .*; not archived'):
    archive.archive(str(run), str(dest))
  assert not dest.exists() and not (run / run_folder.LOCK_FILE).exists()


def test_a_full_disk_leaves_no_lock_and_no_partial_archive(tmp_path, monkeypatch):
  # Before: writing the lock on a full disk raised OSError out of the lock's
  # acquire, outside archive's try, and left an empty run.lock behind.
  run = _run(tmp_path)
  dest = tmp_path / 'archive'
  real = os.pwrite

  def full_disk(*args):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
  monkeypatch.setattr(os, 'pwrite', full_disk)
  with pytest.raises(archive.ArchiveError, match=r'cannot write the lock .*run\.lock: No space '
                     r'left on device; not archived'):
    archive.archive(str(run), str(dest))
  assert not (run / run_folder.LOCK_FILE).exists()
  monkeypatch.setattr(os, 'pwrite', real)
  copy = archive.shutil.copyfileobj

  def full_disk_copy(*args):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
  monkeypatch.setattr(archive.shutil, 'copyfileobj', full_disk_copy)   # the disk fills later
  with pytest.raises(archive.ArchiveError, match=f'cannot write the archive {dest}: No space'):
    archive.archive(str(run), str(dest))
  assert not (run / run_folder.LOCK_FILE).exists()
  assert sorted(os.listdir(tmp_path)) == ['run']   # no archive, no .partial
  monkeypatch.setattr(archive.shutil, 'copyfileobj', copy)
  assert archive.archive(str(run), str(dest))[-1] == 'metrics.jsonl.gz'
