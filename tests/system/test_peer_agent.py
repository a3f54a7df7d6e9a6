"""NLE's own agent as a policy for our evaluator (analysis/peer_agent.py,
launch/evaluate_peer.py): sampling, the LSTM reset flag, the same games as
launch/evaluate.py, the JSON record, the errors. The tests that load a real
`nle.agent.agent` network need torch (requirements-peer.txt) and are skipped
without it; the rest run everywhere with a numpy stand-in for the network."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from analysis import evaluation
from analysis import peer_agent
from configs import nethack_popart
from analysis.run_loading import load_run
from analysis.run_evaluation import run_evaluation
from tests.support.training_runs import train
from tests.support import full_disk

# One pytest-xdist worker: the run is trained once (module fixture).
pytestmark = pytest.mark.xdist_group('peer_agent')

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MONK = 'mon-hum-neu-mal'


def test_sampling_follows_the_softmax_and_greedy_takes_the_argmax():
  logits = np.log(np.array([[0.7, 0.2, 0.1], [0.05, 0.05, 0.9]]))
  rng = np.random.default_rng(0)
  draws = np.stack([peer_agent.sample_actions(logits, rng) for _ in range(20_000)])
  freq0 = np.bincount(draws[:, 0], minlength=3) / len(draws)
  freq1 = np.bincount(draws[:, 1], minlength=3) / len(draws)
  np.testing.assert_allclose(freq0, [0.7, 0.2, 0.1], atol=0.015)
  np.testing.assert_allclose(freq1, [0.05, 0.05, 0.9], atol=0.015)
  forward = lambda obs, first, state: (logits, state)
  action, _, _ = peer_agent.make_policy(forward, greedy=True)(None, {}, np.zeros(2, bool), (), rng)
  assert action.tolist() == [0, 2] and action.dtype == np.int32


class CountingNet:
  """A numpy stand-in for NLE's network: its state counts the steps since
  `done`, zeroed where `done` is set as NLE's LSTM zeroes its state; its
  logits pick action (count mod 3). It records every `done` it is given."""

  def __init__(self):
    self.dones = []

  def initial_state(self, batch_size):
    return np.zeros(batch_size, np.int64)

  def forward(self, obs, first, state):
    assert obs['glyphs'].shape[1:] == (21, 79) and obs['blstats'].shape[1:] == (27,)
    self.dones.append(first.copy())
    state = np.where(first, 0, state) + 1
    logits = np.full((len(first), 3), -30.0)
    logits[np.arange(len(first)), (state - 1) % 3] = 0.0
    return logits, state


class FakePeer(peer_agent.PeerAgent):

  def __init__(self, env_id='NetHackScore-v0'):
    self.net = CountingNet()
    super().__init__(model=None, flags={'env': env_id, 'use_lstm': True, 'total_steps': 1000})

  def initial_state(self, batch_size):
    return self.net.initial_state(batch_size)

  def policy(self, greedy=False):
    return peer_agent.make_policy(self.net.forward, greedy)


@pytest.fixture(scope='module')
def monk_run(tmp_path_factory):
  config = nethack_popart.get_config(f'smoke,chars={MONK}')
  with config.unlocked():
    config.workdir = str(tmp_path_factory.mktemp('monk') / 'run')
  _, workdir = train(config)
  return workdir


def test_the_peer_plays_the_games_our_evaluator_plays(monk_run, tmp_path, monkeypatch):
  seeds = []
  make_task_env = evaluation.make_task_env

  def recording(run, task_id, n, seed, video):
    seeds.append((task_id, n, seed))
    return make_task_env(run, task_id, n, seed, video)

  monkeypatch.setattr(evaluation, 'make_task_env', recording)
  peer = FakePeer()
  model_tar = tmp_path / 'latest' / 'model.tar'
  model_tar.parent.mkdir()
  (model_tar.parent / 'logs.tsv').write_text('# Step\tmean_episode_return\n80\t1.0\n160\t2.5\n')
  record = peer_agent.evaluate(load_run(monk_run), peer, str(model_tar), episodes=2, num_envs=2,
                               seed=3, max_steps=40)
  run_evaluation(monk_run, episodes=2, num_envs=2, seed=3, max_steps=40, out=lambda _: None)
  assert seeds[0] == seeds[1] == (0, 2, evaluation.env_seed(3, 0))
  # The LSTM-reset flag is True on each env's first step and only where an episode began.
  assert peer.net.dones[0].tolist() == [True, True] and not np.any(peer.net.dones[1:])
  assert record['agent'] == 'nle.agent.agent' and record['env_steps'] == 160
  assert record['settings']['seed'] == 3 and MONK in record['tasks']
  assert record['peer_flags']['env'] == 'NetHackScore-v0'
  assert record['tasks'][MONK]['env_steps'] <= 40


def test_a_peer_of_another_env_or_task_is_refused(monk_run, tmp_path):
  run, model_tar = load_run(monk_run), str(tmp_path / 'model.tar')
  with pytest.raises(ValueError, match='trained on NetHackStaircase-v0.*plays NetHackScore-v0'):
    peer_agent.evaluate(run, FakePeer('NetHackStaircase-v0'), model_tar)
  with pytest.raises(ValueError, match=f"--task='wiz' is not a task of .*; choose one of {MONK}"):
    peer_agent.evaluate(run, FakePeer(), model_tar, task='wiz')


def test_load_errors_name_the_file_and_the_missing_package(tmp_path, monkeypatch):
  with pytest.raises(FileNotFoundError, match='no NLE agent checkpoint at .*nothing.tar'):
    peer_agent.load_nle_agent(str(tmp_path / 'nothing.tar'))
  path = tmp_path / 'model.tar'
  path.write_bytes(b'not a checkpoint')
  monkeypatch.setitem(sys.modules, 'torch', None)  # as if torch were not installed
  with pytest.raises(ImportError, match=r'pip install "torch==2.13.0\+cpu"'):
    peer_agent.load_nle_agent(str(path))


def test_last_logged_step_reads_torchbeasts_log(tmp_path):
  model_tar = str(tmp_path / 'model.tar')
  assert peer_agent.last_logged_step(model_tar) is None
  (tmp_path / 'logs.tsv').write_text('# Step\tloss\n320\t0.5\n640\t0.4\n')
  assert peer_agent.last_logged_step(model_tar) == 640


def _cli(*args):
  return subprocess.run([sys.executable, os.path.join(REPO, 'launch', 'evaluate_peer.py'), *args],
                        check=False, capture_output=True, text=True, cwd=REPO, timeout=300)


def test_cli_without_a_checkpoint_says_so(monk_run):
  out = _cli('--model_tar=/nonexistent/model.tar', f'--workdir={monk_run}')
  assert out.returncode == 2
  assert 'error: no NLE agent checkpoint at /nonexistent/model.tar' in out.stderr


# --- With torch: NLE's own network, saved as nle.agent.agent saves it. ---

def _save_nle_checkpoint(path, use_lstm=True):
  torch = pytest.importorskip('torch')
  from nle.agent import agent as nle_agent
  from types import SimpleNamespace
  torch.manual_seed(0)
  shapes = {'glyphs': SimpleNamespace(shape=(21, 79)), 'blstats': SimpleNamespace(shape=(27,))}
  model = nle_agent.NetHackNet(shapes, 23, use_lstm)
  flags = {'env': 'NetHackScore-v0', 'use_lstm': use_lstm, 'total_steps': 500,
           'device': torch.device('cpu'), 'savedir': str(path.parent)}
  torch.save({'model_state_dict': model.state_dict(), 'optimizer_state_dict': {},
              'flags': flags}, path)
  return model


def test_nle_checkpoint_loads_and_acts_as_its_own_forward(tmp_path):
  torch = pytest.importorskip('torch')
  path = tmp_path / 'model.tar'
  model = _save_nle_checkpoint(path)
  peer = peer_agent.load_nle_agent(str(path))
  rng = np.random.default_rng(0)
  obs = {'glyphs': rng.integers(0, 5976, (2, 21, 79)).astype(np.int16),
         'blstats': rng.integers(0, 20, (2, 27)).astype(np.int64)}
  forward = peer_agent.torch_forward(peer.model)
  first = np.array([True, True])
  logits, state = forward(obs, first, peer.initial_state(2))
  model.eval()
  with torch.no_grad():
    inputs = {k: torch.from_numpy(v)[None] for k, v in obs.items()}
    inputs['done'] = torch.from_numpy(first)[None]
    want, _ = model(inputs, model.initial_state(2))
  np.testing.assert_allclose(logits, want['policy_logits'][0].numpy(), rtol=1e-5, atol=1e-6)
  # done=True zeroes the LSTM state: a carried state, reset, gives the first step's logits.
  again, _ = forward(obs, first, state)
  np.testing.assert_allclose(again, logits, rtol=1e-5, atol=1e-6)
  carried, _ = forward(obs, np.array([False, False]), state)
  assert not np.allclose(carried, logits)


def test_cli_evaluates_an_nle_checkpoint_on_our_run(monk_run, tmp_path):
  pytest.importorskip('torch')
  path = tmp_path / 'model.tar'
  _save_nle_checkpoint(path)
  out = _cli(f'--model_tar={path}', f'--workdir={monk_run}', '--episodes=2', '--num_envs=2',
             '--max_steps=30')
  assert out.returncode == 0, out.stderr
  assert 'at env step (unknown)' in out.stdout and MONK in out.stdout
  with open(os.path.join(monk_run, 'eval', 'peer_final.json')) as f:
    record = json.load(f)
  assert record['tasks'][MONK]['env_steps'] == 30 and record['env_steps'] is None
  assert record['agent'] == 'nle.agent.agent' and record['peer_flags']['use_lstm'] is True


def test_cli_on_a_full_disk_is_one_line_and_leaves_no_file(monk_run, tmp_path):
  # Issue [25]: the record is written whole or not at all; a full disk is one line.
  pytest.importorskip('torch')
  path = tmp_path / 'model.tar'
  _save_nle_checkpoint(path)
  eval_dir = os.path.join(monk_run, 'eval')
  before = full_disk.files_under(eval_dir)
  out = full_disk.run_tool('evaluate_peer.py', eval_dir, f'--model_tar={path}',
                           f'--workdir={monk_run}', '--episodes=2', '--num_envs=2',
                           '--max_steps=30')
  assert out.returncode == 2 and 'Traceback' not in out.stderr, out.stderr
  assert out.stderr.strip().splitlines()[-1] == (
      f'error: cannot write into {eval_dir}: No space left on device'), out.stderr
  assert full_disk.files_under(eval_dir) == before
