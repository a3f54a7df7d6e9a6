"""Evaluation of trained runs: loading checkpoints, exactly N whole episodes per
task, the JSON record, the CLI, videos, and the NetHack terminal renderer."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import imageio_ffmpeg
import numpy as np
import pytest
from PIL import Image

from analysis import evaluation
from analysis import run_loading
from analysis.run_loading import checkpoint_steps, load_run
from configs import atari_single, cartpole, nethack_popart, validation
from envs import atari, registry, render
from envs.base import StepResult
from analysis.run_evaluation import run_evaluation
from tests.support.training_runs import train
from tests.support import full_disk

# One pytest-xdist worker: the run is trained once (module fixture).
pytestmark = pytest.mark.xdist_group('evaluate')

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _train(config, workdir):
  with config.unlocked():
    config.workdir = str(workdir)
  _, workdir = train(config)
  return workdir


@pytest.fixture(scope='module')
def cartpole_run(tmp_path_factory):
  """A smoke run with an LSTM core (the recurrent path) and two checkpoints."""
  config = cartpole.get_config('smoke')
  config.network.lstm_size = 8
  config.keep_intermediate = True
  config.checkpoint_every_steps = config.unroll_length * config.batch_size  # every update
  return _train(config, tmp_path_factory.mktemp('cartpole') / 'run')


# --- Episode bookkeeping, on a fake env with known episode lengths. ---

class FakeEnv:
  """Env i plays episodes of `lengths[i]` steps, reward 1 per step, with the
  auto-reset convention of envs/base.py; it records what the policy saw."""

  def __init__(self, lengths):
    self.lengths = np.asarray(lengths)
    self.num_envs = len(lengths)
    self.t = np.zeros(self.num_envs, np.int64)   # steps into the current episode
    self.resetting = np.zeros(self.num_envs, bool)

  def _result(self, reward, terminated):
    n = self.num_envs
    return StepResult(obs={'state': self.t[:, None].astype(np.float32)},
                      reward=reward.astype(np.float32), terminated=terminated,
                      truncated=np.zeros(n, bool), task_id=np.zeros(n, np.int32))

  def reset(self):
    self.t[:] = 0
    return self._result(np.zeros(self.num_envs), np.zeros(self.num_envs, bool))

  def step(self, actions):
    reward = np.where(self.resetting, 0.0, 1.0)
    self.t = np.where(self.resetting, 0, self.t + 1)
    terminated = ~self.resetting & (self.t == self.lengths)
    self.resetting = terminated
    return self._result(reward, terminated)


def test_every_env_plays_its_quota_so_long_episodes_are_not_dropped():
  seen = []

  def policy(variables, obs, first, state, rng):
    seen.append((obs['state'][:, 0].copy(), obs['prev_action'].copy(), first.copy()))
    return np.ones(len(first), np.int32), state, rng

  env = FakeEnv([1, 10])
  episodes, complete, steps, _ = evaluation.play_episodes(
      env, policy, None, (), num_episodes=4, rng=None, obs_keys=('state',))
  assert complete
  # Two from each env: the short episodes do not crowd out the long ones.
  assert sorted(e.episode_length for e in episodes) == [1, 1, 10, 10]
  # Reset steps count in neither length nor return.
  assert all(e.episode_return == e.episode_length for e in episodes)
  assert steps == 2 * (10 + 1) - 1
  # Env 0 (1-step episodes): first at every new episode, prev_action 0 there.
  states, prev_actions, firsts = (np.array([s[k][0] for s in seen]) for k in range(3))
  np.testing.assert_array_equal(firsts[:4], [True, False, True, False])
  np.testing.assert_array_equal(prev_actions[:4], [0, 1, 0, 1])
  np.testing.assert_array_equal(states[:4], [0, 1, 0, 1])


def test_quotas_add_up():
  assert evaluation.episode_quotas(10, 4).tolist() == [3, 3, 2, 2]
  assert evaluation.episode_quotas(3, 3).tolist() == [1, 1, 1]


def test_atari_evaluation_plays_whole_games():
  config = atari_single.get_config('game=Pong,smoke')
  spec = validation.validate_spec(config)
  kwargs = registry.task_env_kwargs(config.tasks[0], 1, spec.envs, training=False)
  assert config.atari.episodic_life and kwargs['episodic_life'] is False
  assert kwargs['max_episode_steps'] == 27_000 and kwargs['reward_clip'] is False
  del config.atari  # a config without the group gets the protocol's defaults
  spec = validation.validate_spec(config)
  assert spec.envs['atari'] == atari.AtariConfig()
  assert registry.task_env_kwargs(config.tasks[0], 1, spec.envs, training=False)['episodic_life'] is False


def test_random_character_role_tasks_play_their_role():
  config = nethack_popart.get_config('chars=@')
  settings = registry.default_settings()
  kwargs = [registry.task_env_kwargs(t, len(config.tasks), settings, training=False)
            for t in config.tasks]
  assert [k['character'] for k in kwargs] == [t['name'] for t in config.tasks]


def test_render_tty_draws_a_character_in_its_colour():
  chars = np.full((24, 80), ord(' '), np.uint8)
  colors = np.zeros((24, 80), np.int8)
  chars[5, 10], colors[5, 10] = ord('@'), 1  # red
  image = render.render_tty(chars, colors)
  h, w = render.cell_size()
  assert image.shape == (24 * h, 80 * w, 3) and image.dtype == np.uint8
  cell = image[5 * h:6 * h, 10 * w:11 * w].reshape(-1, 3)
  lit = cell.any(axis=1)
  assert lit.sum() > 5
  assert (cell[lit] == render.CURSES_COLOURS[1]).all()
  assert image.any(axis=2).sum() == lit.sum()  # nothing drawn elsewhere


# --- Loading and evaluating real runs. ---

def test_load_errors_name_what_is_missing(tmp_path, cartpole_run):
  with pytest.raises(FileNotFoundError, match='no run folder'):
    load_run(str(tmp_path / 'nope'))
  (tmp_path / 'empty').mkdir()
  with pytest.raises(FileNotFoundError, match='no config.json'):
    load_run(str(tmp_path / 'empty'))
  (tmp_path / 'fresh').mkdir()
  with open(os.path.join(cartpole_run, 'config.json')) as f, \
      open(tmp_path / 'fresh' / 'config.json', 'w') as g:
    g.write(f.read())
  with pytest.raises(FileNotFoundError, match='no checkpoints'):
    load_run(str(tmp_path / 'fresh'))
  available = ', '.join(map(str, checkpoint_steps(cartpole_run)))
  with pytest.raises(FileNotFoundError, match=f'available: {available}$'):
    load_run(cartpole_run, step=12)


def _copy_run(cartpole_run, tmp_path):
  """A copy of the run to damage; (its folder, its checkpoints folder)."""
  run = tmp_path / 'copy'
  shutil.copytree(cartpole_run, run)
  return str(run), run / 'checkpoints'


def _truncate_a_data_file(step_dir):
  data = sorted(p for p in step_dir.rglob('*') if p.is_file() and p.parent.name == 'd')
  with open(data[0], 'r+b') as f:
    f.truncate(max(0, data[0].stat().st_size // 2))


def test_evaluation_takes_the_newest_intact_checkpoint_and_names_the_damaged(tmp_path,
                                                                          cartpole_run):
  # Before: a 153-line traceback; training's check was not used.
  run, ckpts = _copy_run(cartpole_run, tmp_path)
  _truncate_a_data_file(ckpts / '16')
  out = _cli(f'--workdir={run}', '--episodes=2')
  assert out.returncode == 0, out.stderr
  assert 'skipped the checkpoint at env step 16: damaged (' in out.stdout
  assert f'loaded {run} at env step 8' in out.stdout
  assert (ckpts / '16').is_dir()  # evaluation only reads: nothing is moved
  out = _cli(f'--workdir={run}', '--step=16')
  assert out.returncode == 2 and 'Traceback' not in out.stderr
  assert out.stderr.startswith(f'error: the checkpoint at env step 16 in {ckpts} is damaged (')
  assert len(out.stderr.strip().splitlines()) == 1


def test_a_checkpoint_without_manifest_that_does_not_restore_is_skipped(tmp_path, cartpole_run):
  # Cut off before its manifest (verified.json) was written, then damaged.
  run, ckpts = _copy_run(cartpole_run, tmp_path)
  (ckpts / '16' / 'verified.json').unlink()
  _truncate_a_data_file(ckpts / '16')
  loaded = load_run(run)
  assert loaded.env_steps == 8
  assert [s for s, _ in loaded.skipped] == [16]
  # Found by the check before any restore: the folder says every checkpoint has a manifest.
  assert loaded.skipped[0][1] == 'no verified.json: cut off before it was verified'


def test_a_checkpoint_rotated_away_while_it_loads_is_replaced(tmp_path, cartpole_run,
                                                              monkeypatch):
  # Before: 4 of 4 evaluations beside a rotating trainer ended in a traceback.
  run, ckpts = _copy_run(cartpole_run, tmp_path)
  restore = run_loading.Checkpointer.restore
  calls = []

  def rotating(self, like, env_steps=None):
    calls.append(env_steps)
    if len(calls) == 1:  # the trainer deletes it while it loads
      shutil.rmtree(ckpts / str(env_steps))
      raise FileNotFoundError(f'no checkpoint at env step {env_steps}')
    return restore(self, like, env_steps=env_steps)

  monkeypatch.setattr(run_loading.Checkpointer, 'restore', rotating)
  assert load_run(run).env_steps == 8 and calls == [16, 8]
  calls.clear()
  with pytest.raises(FileNotFoundError, match='at env step 8 .* was deleted while it loaded'):
    load_run(run, step=8)


def test_runs_written_before_a_config_field_existed_still_load(tmp_path, cartpole_run):
  """A field added to the configs later takes its default on load."""
  old = tmp_path / 'old'
  shutil.copytree(cartpole_run, old)
  with open(old / 'config.json') as f:
    saved = json.load(f)
  del saved['optimizer']['eps_in_sqrt']
  with open(old / 'config.json', 'w') as f:
    json.dump(saved, f)
  run = load_run(str(old), step=8)
  assert run.spec.optimizer.eps_in_sqrt is True
  assert run.spec.optimizer.rmsprop_eps == saved['optimizer']['rmsprop_eps']


def test_library_evaluation_of_each_checkpoint(cartpole_run):
  assert {8, 16} <= set(checkpoint_steps(cartpole_run))  # (and 0, the initialisation)
  run = load_run(cartpole_run, step=8)
  assert run.env_steps == 8 and run.spec.run.num_learner_devices == 1
  record = run_evaluation(cartpole_run, step=8, episodes=3, greedy=True, out=lambda _: None)
  task = record['tasks']['CartPole']
  assert task['episodes'] == 3 and len(task['returns']) == 3 and task['complete']
  assert set(task['return']) == set(evaluation.STATS) == set(task['length'])
  assert task['returns'] == task['lengths']  # +1 per step
  with open(os.path.join(cartpole_run, 'eval', '8.json')) as f:
    assert json.load(f)['settings'] == {'episodes': 3, 'greedy': True, 'uniform': False,
                                        'step': 8, 'seed': 0, 'max_steps': None, 'num_envs': 8}
  # A second evaluation of the step is kept beside the first, unless asked to replace it.
  first = open(os.path.join(cartpole_run, 'eval', '8.json')).read()
  run_evaluation(cartpole_run, step=8, episodes=2, out=lambda _: None)
  assert open(os.path.join(cartpole_run, 'eval', '8.json')).read() == first
  with open(os.path.join(cartpole_run, 'eval', '8.2.json')) as f:
    assert json.load(f)['settings']['episodes'] == 2
  run_evaluation(cartpole_run, step=8, episodes=1, overwrite=True, out=lambda _: None)
  with open(os.path.join(cartpole_run, 'eval', '8.json')) as f:
    assert json.load(f)['settings']['episodes'] == 1
  assert not os.path.exists(os.path.join(cartpole_run, 'eval', '8.3.json'))
  # The uniform-random baseline of the same task, in a file of its own.
  record = run_evaluation(cartpole_run, step=8, episodes=3, uniform=True, out=lambda _: None)
  assert record['tasks']['CartPole']['episodes'] == 3 and record['settings']['uniform']
  assert os.path.exists(os.path.join(cartpole_run, 'eval', '8_uniform.json'))


def _cli(*args):
  return subprocess.run([sys.executable, os.path.join(REPO, 'launch', 'evaluate.py'), *args],
                        check=False, capture_output=True, text=True, cwd=REPO, timeout=300)


def test_cli_writes_the_latest_checkpoints_evaluation(cartpole_run):
  out = _cli(f'--workdir={cartpole_run}', '--episodes=3')
  assert out.returncode == 0, out.stderr
  assert 'CartPole' in out.stdout and 'return mean' in out.stdout
  with open(os.path.join(cartpole_run, 'eval', '16.json')) as f:
    record = json.load(f)
  assert record['env_steps'] == 16 and record['tasks']['CartPole']['episodes'] == 3


def test_cli_on_a_full_disk_is_one_line_and_keeps_the_earlier_evaluation(cartpole_run, tmp_path):
  # Before issue [25]: an empty eval/<step>.json that later made run_table fail
  # without naming the file. Now the record is written whole or not at all,
  # even over an earlier one (--overwrite): the earlier one stays as it was.
  run, _ = _copy_run(cartpole_run, tmp_path)
  eval_dir = os.path.join(run, 'eval')
  os.makedirs(eval_dir, exist_ok=True)
  with open(os.path.join(eval_dir, '16.json'), 'w') as f:
    f.write('{"earlier": true}')
  before = full_disk.files_under(eval_dir)
  out = full_disk.run_tool('evaluate.py', eval_dir, f'--workdir={run}', '--episodes=2',
                           '--overwrite')
  assert out.returncode == 2 and 'Traceback' not in out.stderr, out.stderr
  assert out.stderr.strip().splitlines()[-1] == (
      f'error: cannot write into {eval_dir}: No space left on device'), out.stderr
  assert full_disk.files_under(eval_dir) == before
  with open(os.path.join(eval_dir, '16.json')) as f:
    assert json.load(f) == {'earlier': True}


def test_cli_unknown_step_lists_the_available_ones(cartpole_run):
  out = _cli(f'--workdir={cartpole_run}', '--step=5')
  assert out.returncode == 2
  available = ', '.join(map(str, checkpoint_steps(cartpole_run)))
  assert f'no checkpoint at env step 5 in {cartpole_run}; available: {available}' in out.stderr


def test_atari_video_capped_by_max_steps_is_an_mp4(tmp_path):
  workdir = _train(atari_single.get_config('game=Pong,smoke'), tmp_path / 'pong')
  assert render.mp4_writer_available()   # imageio-ffmpeg is in requirements.txt
  lines = []
  record = run_evaluation(workdir, episodes=1, video=True, max_steps=30, out=lines.append)
  task = record['tasks']['Pong']
  assert task['episodes'] == 0 and not task['complete']  # a Pong game is ~1000 steps
  video_dir = os.path.join(workdir, 'eval', '16_video')
  assert os.listdir(video_dir) == ['Pong.mp4']   # no GIF beside it
  path = os.path.join(video_dir, 'Pong.mp4')
  assert f'video: {path} (' in '\n'.join(lines)
  with open(path, 'rb') as f:
    assert f.read(8)[4:] == b'ftyp'   # an MP4 container
  frames = imageio_ffmpeg.read_frames(path)
  meta = next(frames)
  assert meta['codec'] == 'h264' and tuple(meta['size']) == (160, 210)  # colour, full size
  assert sum(1 for _ in frames) > 10


def test_without_an_mp4_writer_the_video_is_a_gif(cartpole_run, tmp_path, monkeypatch):
  run, _ = _copy_run(cartpole_run, tmp_path)
  monkeypatch.setitem(sys.modules, 'imageio_ffmpeg', None)   # `import imageio_ffmpeg` fails
  assert not render.mp4_writer_available()
  lines = []
  run_evaluation(run, episodes=1, video=True, max_video_frames=5, out=lines.append)
  video_dir = os.path.join(run, 'eval', '16_video')
  assert os.listdir(video_dir) == ['CartPole.gif']
  path = os.path.join(video_dir, 'CartPole.gif')
  assert any(line.startswith(f'video: {path} (') and 'imageio-ffmpeg' in line for line in lines)
  gif = Image.open(path)
  assert gif.size == (600, 400) and 1 < gif.n_frames <= 5


@pytest.mark.slow  # the full suite only, not the CI tier (docs/testing.md): a NetHack run trained and filmed, about 1 min
def test_nethack_evaluation_with_video(tmp_path):
  config = nethack_popart.get_config('smoke,chars=val-dwa-law-fem')
  workdir = _train(config, tmp_path / 'nethack')
  run = load_run(workdir)
  result = evaluation.evaluate_task(run, 0, num_episodes=2, video=True, max_steps=100,
                                    max_video_frames=40)
  assert len(result.frames) == 40 and result.steps <= 100
  assert all(isinstance(f, render.TtyFrame) for f in result.frames)
  assert render.to_rgb(result.frames[0]).shape == render.render_tty(
      np.zeros((24, 80), np.uint8), np.zeros((24, 80), np.int8)).shape
  assert render.to_rgb(result.frames[0]).any()  # the first screen has text


def test_summary_mean_and_standard_error_by_hand():
  s = evaluation.summarise([1.0, 2.0, 6.0])
  # mean 3; sample std sqrt(((4 + 1 + 9) / 2)) = sqrt(7); s.e. sqrt(7 / 3)
  assert s['mean'] == 3.0 and abs(s['sem'] - np.sqrt(7.0 / 3.0)) < 1e-12
  assert abs(s['std'] - np.sqrt(14.0 / 3.0)) < 1e-12 and (s['min'], s['max'], s['median']) == (1, 6, 2)
  assert evaluation.summarise([5.0])['sem'] is None
  assert evaluation.summarise([]) == {k: None for k in evaluation.STATS}


class ScaledRewardEnv(FakeEnv):
  """FakeEnv whose k-th step of an episode rewards `rewards[k - 1]` (0: no point)."""

  def __init__(self, lengths, rewards):
    super().__init__(lengths)
    self.rewards = np.asarray(rewards, np.float32)

  def step(self, actions):
    result = super().step(actions)   # reward 1 on live steps, 0 on reset steps
    return dataclasses.replace(result, reward=result.reward * self.rewards[self.t - 1])


def test_points_and_reward_per_point_by_hand():
  # Episodes of 4 steps rewarding 0, 20, -800, 0: two points of magnitudes 20 and 800.
  env = ScaledRewardEnv([4, 4], [0.0, 20.0, -800.0, 0.0])

  def policy(variables, obs, first, state, rng):
    return np.zeros(len(first), np.int32), state, rng

  episodes, complete, _, _ = evaluation.play_episodes(
      env, policy, None, (), num_episodes=4, rng=None, obs_keys=('state',))
  assert complete and len(episodes) == 4
  assert all((e.episode_return, e.points, e.abs_reward) == (-780.0, 2, 820.0) for e in episodes)
  assert evaluation.reward_per_point(episodes) == 410.0   # (4 x 820) / (4 x 2)
  assert evaluation.reward_per_point([]) is None
