"""infra/atomic_write.py, and the tools' outputs written through it: a write
that fails (a full disk, a crash) leaves the old file or none, never an
empty or half-written one, and no temporary file."""

import errno
import json
import os

import numpy as np
import pytest

from analysis import run_plots
from infra import atomic_write


def test_a_finished_write_replaces_the_file_and_a_failed_one_leaves_it(tmp_path):
  path = tmp_path / 'eval.json'
  with atomic_write.atomic_open(str(path)) as f:
    json.dump({'a': 1}, f)
  assert json.loads(path.read_text()) == {'a': 1}
  with pytest.raises(OSError, match='No space left'):
    with atomic_write.atomic_open(str(path)) as f:
      f.write('{"a": ')
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))   # the disk fills mid-write
  assert json.loads(path.read_text()) == {'a': 1}            # the old file, whole
  assert os.listdir(tmp_path) == ['eval.json']               # no temporary file left
  with pytest.raises(KeyboardInterrupt):
    with atomic_write.atomic_open(str(tmp_path / 'new.json')) as f:
      f.write('{')
      raise KeyboardInterrupt
  assert os.listdir(tmp_path) == ['eval.json']


def test_the_temporary_name_keeps_the_extension(tmp_path):
  with atomic_write.atomic_path(str(tmp_path / 'figure.png')) as tmp:
    assert tmp.endswith('.png') and os.path.dirname(tmp) == str(tmp_path)
    open(tmp, 'wb').close()
  assert os.listdir(tmp_path) == ['figure.png']


def test_a_plot_that_fails_while_saving_leaves_no_png(tmp_path, monkeypatch):
  from matplotlib.figure import Figure
  rows = [{'env_steps': 100 * i, 'episode_return/Pong': -21.0 + i, 'episodes/Pong': 1}
          for i in range(1, 20)]
  (tmp_path / 'run').mkdir()
  (tmp_path / 'run' / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
  output = tmp_path / 'returns.png'
  real = Figure.savefig

  def full_disk(self, fname, **kwargs):
    real(self, fname, **kwargs)
    with open(fname, 'r+b') as f:
      f.truncate(10)   # the disk filled part-way
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
  monkeypatch.setattr(Figure, 'savefig', full_disk)
  runs = [run_plots.run_metrics.load_metrics(str(tmp_path / 'run'))]
  with pytest.raises(OSError, match='No space left'):
    run_plots.plot(runs, ['run'], str(output), window=1000)
  assert not output.exists()
  assert sorted(os.listdir(tmp_path)) == ['run']
  monkeypatch.setattr(Figure, 'savefig', real)
  run_plots.plot(runs, ['run'], str(output), window=1000)
  assert output.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n' and np.isfinite(output.stat().st_size)


def test_an_output_in_a_missing_folder_or_that_is_a_folder_is_named_before_the_work(tmp_path):
  assert atomic_write.output_problem(str(tmp_path / 'x.png')) is None
  assert atomic_write.output_problem(str(tmp_path / 'no' / 'x.png')) == (
      f'--output: no folder {tmp_path / "no"} to write x.png in')
  assert atomic_write.output_problem(str(tmp_path), '--out') == (
      f'--out: {tmp_path} is a folder, not a file')
