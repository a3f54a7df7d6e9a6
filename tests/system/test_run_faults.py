"""A run folder nothing can spoil, as faults injected into real CartPole
runs in this process: a damaged checkpoint, a changed network on resume, an
unwritable metrics file, a wandb failure, a NaN learning rate. As the
command a user runs: test_run_commands.py; the pieces alone:
test_run_folder.py."""

import dataclasses
import json
import os
import shutil

import jax
import numpy as np
import pytest

from agents import checkpoint
from agents.checkpoint import Checkpointer
from agents.trainer import Trainer
from agents.update_checks import NonFiniteError
from configs.validation import validate_spec
from tests.support.faults import largest_data_file
from rundir import run_folder
from rundir.run_folder import RunFolderError
from rundir.lifecycle import RunStopped
from tests.support.training_runs import train
from tests.support.training_runs import read_records as _records
from tests.support.training_runs import smoke_config as _smoke

def _keeping_all(workdir, updates):
  """The smoke config keeping every checkpoint; (config, env steps per update)."""
  config, per_update = _smoke(workdir, updates=updates)
  config.keep_intermediate = True
  return config, per_update


def _truncate_data(step_dir):
  with open(largest_data_file(step_dir), 'r+b') as f:
    f.truncate(10)


def test_a_damaged_latest_checkpoint_resumes_from_the_newest_intact_one(tmp_path, capsys):
  config, per_update = _keeping_all(tmp_path / 'run', updates=3)
  train(config)
  _truncate_data(tmp_path / 'run' / checkpoint.SUBDIR / str(3 * per_update))
  capsys.readouterr()
  state, _ = train(_keeping_all(tmp_path / 'run', updates=5)[0])
  err = capsys.readouterr().err
  assert f'the checkpoint at env step {3 * per_update:,} is damaged' in err
  assert f'resuming from the newest intact checkpoint, at env step {2 * per_update:,}' in err
  assert int(state.step) == 5
  assert (tmp_path / 'run' / checkpoint.DAMAGED_SUBDIR / str(3 * per_update)).is_dir()
  steps = [r['env_steps'] for r in _records(tmp_path / 'run' / 'metrics.jsonl')]
  assert steps == sorted(steps) and len(set(steps)) == len(steps)  # the 3rd update's row moved
  assert _records(tmp_path / 'run' / f'metrics.after-{2 * per_update}.jsonl')[0]['env_steps'] \
      == 3 * per_update


def test_every_checkpoint_damaged_stops_before_writing(tmp_path):
  config, per_update = _smoke(tmp_path / 'run', updates=1)
  train(config)
  os.remove(tmp_path / 'run' / checkpoint.SUBDIR / str(per_update) / 'default' / '_METADATA')
  before = (tmp_path / 'run' / 'metrics.jsonl').read_text()
  config, _ = _smoke(tmp_path / 'run', updates=2)
  with pytest.raises(RunFolderError, match='every checkpoint in .* is damaged .*_METADATA'):
    train(config)
  assert (tmp_path / 'run' / 'metrics.jsonl').read_text() == before


def test_a_checkpoint_cut_off_before_its_manifest_is_set_aside_on_resume(tmp_path, capsys):
  # Before: trusted unchecked; damaged too, the resume ended in "cannot restore" (exit 2)
  # instead of going back to the intact checkpoint before it.
  config, per_update = _keeping_all(tmp_path / 'run', updates=2)
  train(config)
  last = tmp_path / 'run' / checkpoint.SUBDIR / str(2 * per_update)
  os.remove(last / checkpoint.MANIFEST)
  _truncate_data(last)
  capsys.readouterr()
  state, _ = train(_keeping_all(tmp_path / 'run', updates=3)[0])
  err = capsys.readouterr().err
  assert (f'the checkpoint at env step {2 * per_update:,} is damaged (no verified.json: cut off '
          'before it was verified)') in err
  assert f'resuming from the newest intact checkpoint, at env step {per_update:,}' in err
  assert int(state.step) == 3


def test_a_resume_that_cannot_restore_writes_nothing(tmp_path):
  # Before: config.json (deleted) was rewritten with lstm_size 64 before the restore
  # failed, and the original command was then refused ("saved 64, now 0").
  config, per_update = _smoke(tmp_path / 'run', updates=1)
  train(config)
  run = tmp_path / 'run'
  os.remove(run / 'config.json')
  before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
  config, _ = _smoke(run, updates=2)
  config.network.lstm_size = 64
  with pytest.raises(checkpoint.CheckpointError, match='cannot restore the checkpoint at env step'):
    train(config)
  assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
  config, _ = _smoke(run, updates=2)  # the original command goes on
  state, _ = train(config)
  assert int(state.step) == 2
  assert json.loads((run / 'config.json').read_text())['network']['lstm_size'] == 0


def test_a_full_disk_stops_in_one_line_naming_the_newest_intact_checkpoint(tmp_path,
                                                                          monkeypatch):
  # Before: a 56-line orbax traceback ending "No space left on device".
  import errno
  import orbax.checkpoint as ocp
  config, per_update = _smoke(tmp_path / 'run', updates=3)
  real_save = ocp.CheckpointManager.save

  def save(self, step, *args, **kwargs):
    if step >= 2 * per_update:
      raise ValueError('writing failed') from OSError(errno.ENOSPC, 'No space left on device')
    return real_save(self, step, *args, **kwargs)

  monkeypatch.setattr(ocp.CheckpointManager, 'save', save)
  with pytest.raises(checkpoint.CheckpointError) as e:
    train(config)
  root = tmp_path / 'run' / checkpoint.SUBDIR
  assert str(e.value) == (
      f'cannot write the checkpoint at env step {2 * per_update:,}: no space left on device; '
      f'the newest intact checkpoint is at env step {per_update:,} in {root}. Free space and '
      'resume with the same command')
  monkeypatch.setattr(ocp.CheckpointManager, 'save', real_save)
  state, _ = train(config)  # space freed: the same command goes on from there
  assert int(state.step) == 3


def test_a_workdir_path_too_long_for_the_filesystem_is_refused_at_start(tmp_path):
  # Before: a ~4,000-character path trained two updates, then the first save failed.
  deep = tmp_path.joinpath(*['d' * 200] * 20)
  config, _ = _smoke(deep, updates=1)
  with pytest.raises(RunFolderError, match=r"bytes long; with the 300 a run needs for the files "
                     r"inside it, that passes this filesystem's limit of 4,096"):
    train(config)
  assert not os.path.exists(tmp_path / ('d' * 200))
  config, _ = _smoke(tmp_path / ('n' * 300), updates=1)
  with pytest.raises(RunFolderError, match='is 300 bytes; this filesystem allows 255'):
    train(config)


def test_a_changed_network_on_resume_stops_before_anything_is_written(tmp_path):
  config, _ = _smoke(tmp_path / 'run', updates=1)
  train(config)
  run = tmp_path / 'run'
  before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
  config, _ = _smoke(run, updates=2)
  config.network.lstm_size = 64
  config.learning_rate = 1e-4  # allowed: not named
  with pytest.raises(RunFolderError) as e:
    train(config)
  assert str(e.value) == (f'cannot resume {run} with a different network, tasks or shapes: '
                          'network.lstm_size: saved 0, now 64. Undo these overrides, or choose '
                          'another --config.workdir')
  assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
  # Its checkpoints still load as the run was.
  assert len(Checkpointer(str(run), read_only=True).steps()) == 1


def test_a_hand_edited_config_of_the_wrong_kind_stops_before_anything_is_written(tmp_path):
  # Before: a ValueError traceback from the learning-rate note, after
  # config.json had been rewritten.
  run = tmp_path / 'run'
  config, _ = _smoke(run, updates=1)
  train(config)
  saved = json.loads((run / 'config.json').read_text())
  saved['learning_rate'] = 'fast'
  (run / 'config.json').write_text(json.dumps(saved))
  before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
  config, _ = _smoke(run, updates=2)
  with pytest.raises(RunFolderError) as e:
    train(config)
  assert str(e.value) == (f'cannot resume {run}: its config.json has learning_rate "fast", where '
                          f'a number belongs (edited by hand?). Correct it in {run}/config.json, '
                          'or choose another --config.workdir')
  assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


def test_allowed_changes_resume_and_keep_the_previous_config(tmp_path, capsys):
  config, per_update = _smoke(tmp_path / 'run', updates=1)
  train(config)
  config, _ = _smoke(tmp_path / 'run', updates=2)
  config.learning_rate = 1e-4
  train(config)
  err = capsys.readouterr().err
  assert 'resuming with changed learning_rate: saved 0.003, now 0.0001' in err
  kept = json.loads((tmp_path / 'run' / f'config.{per_update}.json').read_text())
  assert kept['learning_rate'] == 0.003
  assert json.loads((tmp_path / 'run' / 'config.json').read_text())['learning_rate'] == 1e-4


def test_a_longer_resume_says_where_the_learning_rate_goes(tmp_path, capsys):
  # Before: the rate jumped (at the same learner update, from the old schedule's
  # value to the new total's) without a word.
  config, per_update = _smoke(tmp_path / 'run', updates=2)
  train(config)
  rate = config.learning_rate
  capsys.readouterr()
  config, _ = _smoke(tmp_path / 'run', updates=4)
  train(config)
  err = capsys.readouterr().err
  assert (f'total_env_steps: saved {2 * per_update:,}, now {4 * per_update:,}; the learning rate '
          'anneals linearly to 0 over the new total: at learner update 2, where this run '
          f'resumes, it is {rate / 2:.3g} (the saved total had 0)') in err
  resumed = _records(tmp_path / 'run' / 'metrics.jsonl')[-2:]
  assert [r['learner_steps'] for r in resumed] == [3, 4]
  np.testing.assert_allclose([r['learning_rate'] for r in resumed],
                             [rate * (1 - k / 4) for k in (2, 3)], rtol=1e-5)


def test_resuming_a_finished_run_says_so(tmp_path, capsys):
  config, per_update = _smoke(tmp_path / 'run', updates=1)
  train(config)
  before = (tmp_path / 'run' / 'metrics.jsonl').read_text()
  capsys.readouterr()
  state, _ = train(config)
  assert state is None
  assert (f'already finished at env step {per_update:,} (total_env_steps {per_update:,}); '
          'nothing to do') in capsys.readouterr().err
  assert (tmp_path / 'run' / 'metrics.jsonl').read_text() == before


def test_a_folder_without_checkpoints_keeps_the_earlier_run_apart(tmp_path, capsys):
  # Before: the new run (another network) started from 0 in the same files:
  # config.json overwritten, the wandb id and the TensorBoard curve shared.
  run = tmp_path / 'run'
  config, per_update = _smoke(run, updates=1)
  config.wandb.mode = 'offline'
  train(config)
  old = {name: (run / name).read_bytes()
         for name in ('config.json', 'metrics.jsonl', 'wandb_run_id.txt')}
  old_events = sorted(p.name for p in run.glob('events.out.tfevents.*'))
  assert old_events
  shutil.rmtree(run / 'checkpoints')
  capsys.readouterr()
  config, _ = _smoke(run, updates=1)
  config.wandb.mode = 'offline'
  config.network.lstm_size = 8
  train(config)
  err = capsys.readouterr().err
  aside = run / 'earlier_run.1'
  assert (f'{run} held an earlier run with no checkpoint to resume from (logged to env step '
          f'{per_update:,})') in err and f'moved to {aside}' in err
  assert {name: (aside / name).read_bytes() for name in old} == old
  assert sorted(p.name for p in aside.glob('events.out.tfevents.*')) == old_events
  assert json.loads((run / 'config.json').read_text())['network']['lstm_size'] == 8
  assert (run / 'wandb_run_id.txt').read_text() != old['wandb_run_id.txt'].decode()
  rows = _records(run / 'metrics.jsonl')
  assert rows and rows[0]['env_steps'] <= per_update and not (run / 'metrics.after-0.jsonl').exists()
  assert not set(p.name for p in run.glob('events.out.tfevents.*')) & set(old_events)


def test_an_unwritable_metrics_file_saves_a_checkpoint_and_names_the_file(tmp_path):
  run = tmp_path / 'run'
  run.mkdir()
  os.symlink('/dev/full', run / 'metrics.jsonl')  # every write fails: ENOSPC
  config, per_update = _smoke(run, updates=3, every_update=False)
  with pytest.raises(RunStopped) as e:
    train(config)
  assert str(e.value) == (f'cannot write metrics to {run}/metrics.jsonl: No space left on '
                          f'device; the checkpoint at env step {per_update:,} is in '
                          f'{run / checkpoint.SUBDIR}')
  assert Checkpointer(str(run), read_only=True).steps() == (per_update,)
  assert not (run / run_folder.LOCK_FILE).exists()


def test_a_wandb_failure_is_a_warning_and_metrics_go_on(tmp_path, monkeypatch, capsys):
  import wandb

  class DeadRun:
    def log(self, *args, **kwargs):
      raise ConnectionResetError('Connection lost')

    def finish(self, *args, **kwargs):
      raise ConnectionResetError('Connection lost')

  monkeypatch.setattr(wandb, 'init', lambda **kwargs: DeadRun())
  monkeypatch.setattr(wandb, 'teardown', lambda **kwargs: None)
  config, _ = _smoke(tmp_path / 'run', updates=3, every_update=False)
  config.wandb.mode = 'offline'
  state, _ = train(config)
  assert int(state.step) == 3
  assert [r['learner_steps'] for r in _records(tmp_path / 'run' / 'metrics.jsonl')] == [1, 2, 3]
  err = capsys.readouterr().err
  assert err.count('warning: wandb failed') == 1
  assert 'ConnectionResetError: Connection lost' in err
  assert 'logging env step' in (tmp_path / 'run' / 'wandb_failed.txt').read_text()


def test_a_nan_learning_rate_stops_with_finite_parameters_saved(tmp_path):
  config, per_update = _smoke(tmp_path / 'run', updates=3)
  spec = validate_spec(config)  # the command line rejects it here; the guard must hold anyway
  spec = dataclasses.replace(spec, run=dataclasses.replace(spec.run, learning_rate=float('nan')))
  trainer = Trainer(spec)
  try:
    with pytest.raises(NonFiniteError, match='non-finite parameters or optimiser state .* at '
                       'learner step 1 .*saved at env step 0'):
      trainer.run(lambda metrics: None)
  finally:
    trainer.close()
  saved = Checkpointer(config.workdir, read_only=True).restore_raw(0)['state']
  assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(saved['params']))
  # The optimiser's moments; its injected hyperparameters hold the config's
  # (NaN) rate as given (rl/optimizers.py).
  assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(saved['opt_state']['inner_state'])
             if np.issubdtype(np.asarray(x).dtype, np.floating))
  assert np.isnan(saved['opt_state']['hyperparams']['learning_rate'])
