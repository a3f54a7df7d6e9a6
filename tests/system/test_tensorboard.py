"""TensorBoard event files beside metrics.jsonl (rundir/tensorboard_writer.py,
rundir/run_logger.py): the same scalars at the same env steps, the config and
its hyperparameters, a resumed run's curve without a doubled stretch, and a
failing writer that is one warning while metrics.jsonl goes on. The files are
read back with TensorBoard's own reader."""

import glob

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from configs import cartpole, resume
from rundir import run_logger
from rundir import tensorboard_writer
from tests.support.training_runs import train
from tests.support.training_runs import read_records as _records
from tests.support.training_runs import smoke_config as _smoke


def _read(logdir):
  events = EventAccumulator(str(logdir), size_guidance={'scalars': 0, 'tensors': 0})
  events.Reload()
  return events


def test_a_run_writes_its_metrics_config_and_hyperparameters(tmp_path):
  config, per_update = _smoke(tmp_path / 'run')
  train(config)
  assert glob.glob(str(tmp_path / 'run' / 'events.out.tfevents.*'))
  events = _read(tmp_path / 'run')
  rows = _records(tmp_path / 'run' / 'metrics.jsonl')
  assert len(rows) == 3
  for tag in ('loss/total', 'entropy', 'sps', 'learning_rate', 'grad_norm'):
    got = [(e.step, e.value) for e in events.Scalars(tag)]
    want = [(r['env_steps'], pytest.approx(r[tag], rel=1e-6)) for r in rows]
    assert got == want, tag
  assert [e.step for e in events.Scalars('loss/total')] == [per_update, 2 * per_update,
                                                            3 * per_update]
  assert 'env_steps' not in events.Tags()['scalars']  # it is the x axis
  assert any(t.startswith('config') for t in events.Tags()['tensors'])
  hparams = events.PluginTagToContent('hparams')
  assert '_hparams_/experiment' in hparams and '_hparams_/session_start_info' in hparams
  assert b'learning_rate' in hparams['_hparams_/session_start_info']


def test_hyperparameters_are_values_tensorboard_takes():
  config = cartpole.get_config('smoke')
  hp = tensorboard_writer.hyperparameters(resume.as_source(config))
  assert hp['learning_rate'] == config.learning_rate and hp['popart.enabled'] is False
  assert isinstance(hp['tasks'], str) and 'CartPole' in hp['tasks']  # a list, as JSON text
  assert 'workdir' not in hp
  assert all(isinstance(v, (bool, int, float, str)) for v in hp.values())
  assert tensorboard_writer.scalars({'a': 1, 'b': 2.5, 'c': True, 'd': 'x'}) == {'a': 1.0,
                                                                               'b': 2.5}


def test_a_resumed_run_drops_the_points_no_checkpoint_holds(tmp_path):
  config = resume.as_source(cartpole.get_config('smoke'))
  first = tensorboard_writer.TensorBoardWriter(str(tmp_path), config)
  for step in range(0, 110, 10):
    first.write({'env_steps': step, 'loss': 1.0})
  first.close()
  # Resumed from a checkpoint at step 50: the point at 50 stays, 60..100 go.
  resumed = tensorboard_writer.TensorBoardWriter(str(tmp_path), config, resume_step=50)
  for step in (60, 70):
    resumed.write({'env_steps': step, 'loss': 2.0})
  resumed.close()
  points = [(e.step, e.value) for e in _read(tmp_path).Scalars('loss')]
  assert points == [(0, 1.0), (10, 1.0), (20, 1.0), (30, 1.0), (40, 1.0), (50, 1.0), (60, 2.0),
                    (70, 2.0)]


def test_train_passes_the_resume_step(tmp_path, monkeypatch):
  config, per_update = _smoke(tmp_path / 'run', updates=2)
  train(config)
  resume_steps = []
  real = run_logger.TensorBoardWriter

  def recording(logdir, config, resume_step=None):
    resume_steps.append(resume_step)
    return real(logdir, config, resume_step)

  monkeypatch.setattr(run_logger, 'TensorBoardWriter', recording)
  config.total_env_steps = 3 * per_update
  train(config)
  assert resume_steps == [2 * per_update]
  assert [e.step for e in _read(tmp_path / 'run').Scalars('loss/total')] == [
      per_update, 2 * per_update, 3 * per_update]


def test_a_failing_writer_is_a_warning_and_metrics_go_on(tmp_path, monkeypatch, capsys):
  def full_disk(self, metrics):
    raise OSError(28, 'No space left on device')

  monkeypatch.setattr(tensorboard_writer.TensorBoardWriter, 'write', full_disk)
  config, _ = _smoke(tmp_path / 'run')
  state, _ = train(config)
  assert int(state.step) == 3
  assert [r['learner_steps'] for r in _records(tmp_path / 'run' / 'metrics.jsonl')] == [1, 2, 3]
  err = capsys.readouterr().err
  assert err.count('warning: TensorBoard failed') == 1
  assert 'OSError: [Errno 28] No space left on device' in err
  assert 'logging env step' in (tmp_path / 'run' / 'tensorboard_failed.txt').read_text()


def test_a_writer_that_cannot_start_is_a_warning(tmp_path, monkeypatch, capsys):
  def no_writer(*args, **kwargs):
    raise ImportError('No module named tensorboardX')

  monkeypatch.setattr(run_logger, 'TensorBoardWriter', no_writer)
  config, _ = _smoke(tmp_path / 'run', updates=1)
  state, _ = train(config)
  assert int(state.step) == 1
  assert 'warning: TensorBoard failed while starting (ImportError' in capsys.readouterr().err


def test_off_writes_no_event_files(tmp_path):
  config, _ = _smoke(tmp_path / 'run', updates=1)
  config.log.tensorboard = False
  train(config)
  assert not glob.glob(str(tmp_path / 'run' / 'events.out.tfevents.*'))
