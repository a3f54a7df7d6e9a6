"""Every config family trains end to end in-process on its smoke variant."""

import glob
import json
import os

import numpy as np
import pytest

from configs import (atari_multitask, atari_popart, atari_single, cartpole, cartpole_popart,
                     nethack_popart)
from tests.support.training_runs import train

REQUIRED = ['env_steps', 'learner_steps', 'sps', 'policy_lag', 'loss/total', 'loss/policy',
            'loss/baseline', 'loss/entropy', 'entropy', 'grad_norm']


def _metrics(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f]


def _check_run(config, tmp_path):
  with config.unlocked():
    config.workdir = str(tmp_path / 'run')
  state, workdir = train(config)
  assert int(state.step) >= 1
  assert os.path.exists(os.path.join(workdir, 'config.json'))
  records = _metrics(workdir)
  assert records, 'no metrics written'
  last = records[-1]
  for key in REQUIRED:
    assert key in last, key
  assert last['env/restarts'] == 0
  for task in config.tasks:
    assert f'popart/mu/{task["name"]}' in last
    assert f'popart/sigma/{task["name"]}' in last
    assert f'entropy/{task["name"]}' in last and f'collapse/{task["name"]}' in last
    freqs = [v for k, v in last.items() if k.startswith(f'actions/{task["name"]}/')]
    assert len(freqs) > 1 and sum(freqs) == pytest.approx(1.0)
  assert last['env_steps'] >= config.total_env_steps
  return records


def test_cartpole_smoke(tmp_path):
  _check_run(cartpole.get_config('smoke'), tmp_path)


def test_cartpole_popart_smoke_on_four_learner_devices(tmp_path):
  config = cartpole_popart.get_config('smoke')
  config.num_learner_devices = 4
  config.batch_size = 4
  config.actors.envs_per_actor = 4
  config.unroll_length = 3
  _check_run(config, tmp_path)


def test_cartpole_popart_with_lstm_and_two_actors(tmp_path):
  config = cartpole_popart.get_config('smoke')
  config.network.lstm_size = 8
  config.actors.num_actors = 2
  config.total_env_steps = 4 * config.unroll_length * config.batch_size
  records = _check_run(config, tmp_path)
  assert records[-1]['learner_steps'] == 4


def test_atari_pong_smoke(tmp_path):
  records = _check_run(atari_single.get_config('game=Pong,smoke'), tmp_path)
  assert records[-1]['env_frames'] == 4 * records[-1]['env_steps']


@pytest.mark.parametrize('module', [atari_multitask, atari_popart])
def test_six_game_atari_smoke(module, tmp_path):
  config = module.get_config('smoke')
  assert len(config.tasks) == 6
  _check_run(config, tmp_path)


def test_nethack_main_job_smoke(tmp_path):
  _check_run(nethack_popart.get_config('smoke'), tmp_path)


@pytest.mark.parametrize('net', ['nle_baseline', 'nle_attention'])
def test_nethack_networks_train_end_to_end(net, tmp_path):
  config = nethack_popart.get_config(f'net={net},chars=mon-hum-neu-mal,smoke')
  assert config.network.lstm_size == 512
  _check_run(config, tmp_path)


def test_episode_returns_are_logged_per_task(tmp_path):
  config = cartpole_popart.get_config('smoke')
  config.reward_scales = (1.0, 10.0)
  config.total_env_steps = 40 * config.unroll_length * config.batch_size
  records = _check_run(config, tmp_path)
  returns = {k: v for r in records for k, v in r.items() if k.startswith('episode_return/')}
  assert set(returns) == {'episode_return/cartpole_a', 'episode_return/cartpole_b'}
  lengths = [r['episode_length/cartpole_b'] for r in records if 'episode_length/cartpole_b' in r]
  rets = [r['episode_return/cartpole_b'] for r in records if 'episode_return/cartpole_b' in r]
  # CartPole gives +1 per step, scaled by 10 for task b.
  assert rets[-1] == pytest.approx(10.0 * lengths[-1])


def test_wandb_offline_writes_inside_the_workdir(tmp_path):
  config = cartpole.get_config('smoke')
  config.wandb.mode = 'offline'
  _check_run(config, tmp_path)
  assert glob.glob(str(tmp_path / 'run' / 'wandb' / 'offline-run-*'))
  # A resumed run (same workdir) continues the same wandb run id.
  run_id = (tmp_path / 'run' / 'wandb_run_id.txt').read_text()
  config = cartpole.get_config('smoke')
  config.wandb.mode = 'offline'
  config.total_env_steps *= 2
  _check_run(config, tmp_path)
  assert (tmp_path / 'run' / 'wandb_run_id.txt').read_text() == run_id
  assert all(p.endswith(run_id) for p in glob.glob(str(tmp_path / 'run' / 'wandb' / 'offline-run-*')))


@pytest.mark.parametrize('per, minibatches', [('task', 1), ('task', 2)])
def test_multi_task_diagnostics_and_separating_options_train(tmp_path, per, minibatches):
  """Two tasks with the debiased start, per-task advantages (one minibatch or
  two) and the clip per
  term: every log step has each task's value loss, targets and advantages,
  and the task gradient report reaches the log."""
  config = cartpole_popart.get_config('smoke')
  config.popart.start = 'debiased'
  config.vtrace.normalize_advantages = True
  config.vtrace.normalize_advantages_per = per
  config.vtrace.minibatches = minibatches
  config.optimizer.clip_by = 'term'
  config.log.task_gradients_seconds = 1e-9   # at every update
  config.total_env_steps = 3 * config.unroll_length * config.batch_size
  records = _check_run(config, tmp_path)
  last = records[-1]
  for task in config.tasks:
    name = task['name']
    for key in ('value_loss', 'norm_target_mean', 'norm_target_std', 'advantage_rms',
                'grad_policy', 'grad_baseline', 'grad_share_policy', 'grad_share_baseline'):
      assert np.isfinite(last[f'{key}/{name}']), (key, name)
  assert 'grad_norm/policy' in last and 'grad_norm/baseline' in last
  assert 'task/count' not in last and not any(k.startswith('task/') for k in last)


def test_pause_stops_with_a_checkpoint_and_the_same_command_goes_on(tmp_path):
  config = cartpole.get_config('smoke')
  per_update = config.unroll_length * config.batch_size
  config.total_env_steps = 4 * per_update
  config.pause_at_env_steps = 2 * per_update
  records = _check_run_until(config, tmp_path)
  assert records[-1]['env_steps'] == 2 * per_update
  # The rate anneals over the whole run: the second of four updates takes
  # 3/4 of the base rate (with the pause as the total it would be 1/2).
  assert records[-1]['learning_rate'] == pytest.approx(config.learning_rate * 3 / 4, rel=1e-5)
  config.pause_at_env_steps = 0
  state, _ = train(config)
  assert int(state.step) == 4


def _check_run_until(config, tmp_path):
  with config.unlocked():
    config.workdir = str(tmp_path / 'run')
  state, workdir = train(config)
  assert int(state.step) == config.pause_at_env_steps // (config.unroll_length * config.batch_size)
  assert os.path.isdir(os.path.join(workdir, 'checkpoints', str(config.pause_at_env_steps)))
  return _metrics(workdir)
