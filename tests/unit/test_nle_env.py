"""Tests for envs/nle_env.py: NLE stepped in worker processes behind `BatchedEnv`."""

import gc
import logging
import os
import pathlib
import re
import signal
import tempfile

import numpy as np
import pytest

import nle.nethack
from envs import nethack, registry
from envs.base import StepResult
from envs.concat import ConcatEnv
from envs.nle_env import EPISODE_STATS, NLE_ENV_IDS, NLEBatchedEnv, is_nle_env

ENV_ID = 'NetHackScore-v0'


def make(num_envs=4, num_workers=2, env_kwargs=None, **kwargs):
  env_kwargs = env_kwargs or [{}] * num_envs
  kwargs.setdefault('task_ids', list(range(num_envs)))
  return NLEBatchedEnv(ENV_ID, num_envs, env_kwargs=env_kwargs, num_workers=num_workers, **kwargs)


def random_actions(env, rng):
  return rng.integers(env.num_actions, size=env.num_envs)


def child_pids():
  """Live children of this process, except multiprocessing's resource tracker."""
  pids = []
  for entry in os.listdir('/proc'):
    try:
      with open(f'/proc/{entry}/stat') as f:
        stat = f.read()
      with open(f'/proc/{entry}/cmdline', 'rb') as f:
        cmdline = f.read()
    except (OSError, ValueError):
      continue
    fields = stat.rsplit(')', 1)[1].split()
    state, ppid = fields[0], int(fields[1])
    if ppid == os.getpid() and state != 'Z' and b'resource_tracker' not in cmdline:
      pids.append(int(entry))
  return pids


def test_env_ids():
  assert 'NetHackScore-v0' in NLE_ENV_IDS and 'NetHackChallenge-v0' in NLE_ENV_IDS
  assert is_nle_env('NetHackStaircase-v0') and not is_nle_env('CartPole-v1')
  with pytest.raises(ValueError):
    NLEBatchedEnv('CartPole-v1', 1, [0], [{}])


def test_shapes_dtypes_task_ids_and_reward_scale():
  scales = [1.0, 2.0, 3.0, -0.5]
  rng = np.random.default_rng(0)
  with make(task_ids=[3, 1, 4, 1], seed=7) as plain, make(
      task_ids=[3, 1, 4, 1], seed=7, reward_scales=scales) as scaled:
    assert plain.num_actions == 23
    assert plain.observation_spec == {'glyphs': ((21, 79), np.int16), 'blstats': ((27,), np.int64)}
    results = [(plain.reset(), scaled.reset())]
    # Distinct seeds per env: different dungeons.
    assert not np.array_equal(results[0][0].obs['glyphs'][0], results[0][0].obs['glyphs'][1])
    for _ in range(30):
      actions = random_actions(plain, rng)
      results.append((plain.step(actions), scaled.step(actions)))
    for a, b in results:
      for r in (a, b):
        assert r.obs['glyphs'].shape == (4, 21, 79) and r.obs['glyphs'].dtype == np.int16
        assert r.obs['blstats'].shape == (4, 27) and r.obs['blstats'].dtype == np.int64
        assert r.reward.shape == (4,) and r.reward.dtype == np.float32
        assert r.terminated.dtype == np.bool_ and r.truncated.dtype == np.bool_
        assert r.task_id.dtype == np.int32 and r.task_id.tolist() == [3, 1, 4, 1]
      # Same seed and actions replay the same games, so only the scale differs.
      np.testing.assert_array_equal(a.obs['glyphs'], b.obs['glyphs'])
      np.testing.assert_allclose(b.reward, a.reward * np.float32(scales), rtol=1e-6)
    assert any(np.any(a.reward != 0) for a, _ in results)


def test_auto_reset_after_time_limit():
  rng = np.random.default_rng(1)
  with make(env_kwargs=[{'max_episode_steps': 20}] * 4) as env:
    prev = env.reset()
    seen_truncation = False
    for _ in range(70):
      res = env.step(random_actions(env, rng))
      done_before = prev.terminated | prev.truncated
      # A reset step: reward 0, both flags False.
      assert np.all(res.reward[done_before] == 0)
      assert not np.any(res.terminated[done_before] | res.truncated[done_before])
      # A time limit is a (bootstrapped) truncation, not a termination.
      assert not np.any(res.terminated & res.truncated)
      seen_truncation |= bool(res.truncated.any())
      prev = res
    assert seen_truncation


def test_characters_per_env():
  chars = ['val-dwa-law-fem', 'val-dwa-law-fem', 'wiz-elf-cha-mal', 'wiz-elf-cha-mal']
  with make(env_kwargs=[{'character': c} for c in chars]) as env:
    assert env.env_attr('character') == chars
    alignment = env.reset().obs['blstats'][:, nle.nethack.NLE_BL_ALIGN]
    assert alignment.tolist() == [1, 1, -1, -1]  # lawful, lawful, chaotic, chaotic


def check_replaced(env, before, res, lost, last=None):
  """`lost` envs report truncated on the fresh episode, then a reset step.

  The truncation step ends the lost episodes: it still carries their task ids
  and the episode statistics of `last`, the step before the worker was lost.
  """
  assert env.restarts == 1
  assert res.truncated[lost].all() and not res.terminated[lost].any()
  assert res.game_ended[lost].all()
  assert np.all(res.reward[lost] == 0)
  assert not res.truncated[~lost].any()
  if last is not None:
    np.testing.assert_array_equal(res.task_id, last.task_id)
    for k in EPISODE_STATS:
      np.testing.assert_array_equal(res.episode_stats[k][lost], last.episode_stats[k][lost])
  nxt = env.step(np.zeros(env.num_envs, np.int64))
  assert np.all(nxt.reward[lost] == 0)
  assert not (nxt.truncated[lost].any() or nxt.terminated[lost].any())
  np.testing.assert_array_equal(nxt.obs['glyphs'][lost], res.obs['glyphs'][lost])
  assert np.all(nxt.episode_stats['turns'][lost] == 1)  # the new games' first turn
  assert env.worker_pids != before
  rng = np.random.default_rng(2)
  for _ in range(10):
    env.step(random_actions(env, rng))
  assert env.restarts == 1


def test_worker_restart_after_sigkill(caplog):
  rng = np.random.default_rng(3)
  with make() as env:
    env.reset()
    for _ in range(5):
      last = env.step(random_actions(env, rng))
    assert np.all(last.episode_stats['turns'] > 1)
    before = env.worker_pids
    os.kill(before[1], signal.SIGKILL)
    with caplog.at_level(logging.ERROR):
      res = env.step(random_actions(env, rng))
    assert 'exit code -9' in caplog.text
    check_replaced(env, before, res, lost=np.array([False, False, True, True]), last=last)


def test_worker_restart_after_exception(caplog):
  with make() as env:
    env.reset()
    before = env.worker_pids
    bad = np.zeros(4, np.int64)
    bad[0] = 10**6  # NLE raises IndexError inside worker 0
    with caplog.at_level(logging.ERROR):
      res = env.step(bad)
    assert 'IndexError' in caplog.text and 'Traceback' in caplog.text
    check_replaced(env, before, res, lost=np.array([True, True, False, False]))


def test_worker_restart_after_timeout():
  with make(step_timeout_s=2.0) as env:
    env.reset()
    before = env.worker_pids
    os.kill(before[0], signal.SIGSTOP)  # hangs without dying
    res = env.step(np.zeros(4, np.int64))
    check_replaced(env, before, res, lost=np.array([True, True, False, False]))


def test_close_leaves_no_children():
  # Children that earlier tests in this process left (a Ray or subprocess helper) are not ours to judge.
  before = set(child_pids())
  env = make()
  env.reset()
  pids = env.worker_pids
  assert set(pids) <= set(child_pids())
  env.close()
  env.close()  # idempotent
  assert set(child_pids()) - before == set()
  with pytest.raises(RuntimeError):
    env.step(np.zeros(4, np.int64))

  # Forgetting close() still stops the workers once the env is collected.
  env = make(num_envs=2)
  del env
  gc.collect()
  assert set(child_pids()) - before == set()


# Each role's rank title at experience levels 1-2 (NetHack 3.6 src/role.c,
# roles[].rank[0]), as the status line shows it: "Agent the Evoker  St:...".
# The welcome message says the role too, but on full and new moon nights (and
# Friday the 13th) the game's first message is about the moon instead.
ROLE_OF_RANK = {'Digger': 'arc', 'Plunderer': 'bar', 'Plunderess': 'bar', 'Troglodyte': 'cav',
                'Rhizotomist': 'hea', 'Gallant': 'kni', 'Candidate': 'mon', 'Aspirant': 'pri',
                'Tenderfoot': 'ran', 'Footpad': 'rog', 'Hatamoto': 'sam', 'Rambler': 'tou',
                'Stripling': 'val', 'Evoker': 'wiz'}


def test_rank_titles_cover_every_role():
  assert sorted(set(ROLE_OF_RANK.values())) == sorted(nethack.ROLES)


def test_random_characters_report_the_dealt_roles_task():
  """'@' envs: each episode's task id is the role the game dealt, as the status
  line's rank title says; only the requested key ('tty_chars') is exposed, yet
  episode statistics (read from blstats) come with every game end."""
  ids = tuple(100 + i for i in range(len(nethack.ROLES)))
  groups = [registry.EnvGroup(task_id=t, env_id=ENV_ID, reward_scale=1.0, num_envs=2,
                              env_kwargs={'character': '@', 'max_episode_steps': 8},
                              role_task_ids=ids) for t in (0, 1)]
  env = registry.make_actor_envs(groups, seed=5, resources={'nle': {'workers': 2}},
                                 settings=registry.default_settings(),
                                 observation_keys=('tty_chars',))
  rng = np.random.default_rng(4)
  checked, roles, ends = 0, set(), 0
  try:
    assert set(env.observation_spec) == {'tty_chars'}
    res, new_episode = env.reset(), np.ones(4, bool)
    for _ in range(100):
      assert set(res.obs) == {'tty_chars'}
      assert np.all((res.task_id >= 100) & (res.task_id < 113))
      for i in np.flatnonzero(new_episode):
        status = bytes(res.obs['tty_chars'][i][22]).decode()
        m = re.match(r'\s*\S+ the (\w+)\s', status)
        assert m and m.group(1) in ROLE_OF_RANK, status
        role = nethack.ROLES[res.task_id[i] - 100]
        assert ROLE_OF_RANK[m.group(1)] == role, (status, role)
        checked += 1
        roles.add(role)
      ends += int(res.game_ended.sum())
      for k in EPISODE_STATS:
        assert res.episode_stats[k].dtype == np.float32
      assert np.all(res.episode_stats['turns'][res.game_ended] >= 1)
      assert np.all(res.episode_stats['depth'][res.game_ended] >= 1)
      prev_task, new_episode = res.task_id, res.game_ended
      res = env.step(random_actions(env, rng))
      # The task id changes only where a new episode starts (a reset step).
      assert np.all((res.task_id == prev_task) | new_episode)
  finally:
    env.close()
  assert checked >= 25 and len(roles) >= 6 and ends >= 30, (checked, roles, ends)


def test_episode_stats_are_the_last_live_values():
  """At a game end NLE's observation is blank; the statistics are the game's
  last live score and turn, and the deepest level it reached."""
  rng = np.random.default_rng(6)
  with make(env_kwargs=[{'max_episode_steps': 40}] * 4, seed=3) as env:
    res = env.reset()
    score = res.obs['blstats'][:, nle.nethack.NLE_BL_SCORE].copy()
    turns = res.obs['blstats'][:, nle.nethack.NLE_BL_TIME].copy()
    deepest = res.obs['blstats'][:, nle.nethack.NLE_BL_DEPTH].copy()
    ends = 0
    for _ in range(90):
      prev = res
      res = env.step(random_actions(env, rng))
      bl = res.obs['blstats']
      for i in range(4):
        if prev.game_ended[i]:  # a reset step: a new game
          score[i], turns[i], deepest[i] = 0, 0, 0
        if res.game_ended[i]:
          assert not bl[i].any()  # NLE blanks the final observation
          ends += 1
          assert res.episode_stats['score'][i] == score[i]
          assert res.episode_stats['turns'][i] == turns[i]
          assert res.episode_stats['depth'][i] == deepest[i] >= 1
        else:
          score[i], turns[i] = bl[i, nle.nethack.NLE_BL_SCORE], bl[i, nle.nethack.NLE_BL_TIME]
          deepest[i] = max(deepest[i], bl[i, nle.nethack.NLE_BL_DEPTH])
    assert ends >= 8


def test_concat_fills_missing_episode_stats_with_nan():
  def result(n, stats):
    return StepResult(obs={'x': np.zeros((n, 1))}, reward=np.zeros(n, np.float32),
                      terminated=np.zeros(n, bool), truncated=np.zeros(n, bool),
                      task_id=np.zeros(n, np.int32), episode_stats=stats)
  both = ConcatEnv._concat([result(2, None), result(1, {'score': np.array([5.0], np.float32)})])
  np.testing.assert_array_equal(both.episode_stats['score'], [np.nan, np.nan, 5.0])
  assert ConcatEnv._concat([result(1, None), result(1, None)]).episode_stats is None


def test_files_stay_in_their_folders(tmp_path, monkeypatch):
  """Ttyrecs only when asked for, under the savedir, one folder per batched env
  and env; NLE's scratch folders in a temp dir per worker, removed when the
  worker stops (killed too); nothing in the working directory."""
  cwd, tmp, savedir = tmp_path / 'cwd', tmp_path / 'tmp', tmp_path / 'run' / 'nle'
  cwd.mkdir()
  tmp.mkdir()
  monkeypatch.chdir(cwd)
  monkeypatch.setattr(tempfile, 'tempdir', str(tmp))
  rng = np.random.default_rng(7)
  kwargs = [{'max_episode_steps': 10}] * 4
  with make(env_kwargs=kwargs, savedir=str(savedir)) as a, \
      make(env_kwargs=kwargs, savedir=str(savedir), seed=1) as b, \
      make(num_envs=2, env_kwargs=[{'max_episode_steps': 10}] * 2) as plain:
    for env in (a, b, plain):
      env.reset()
      for _ in range(25):  # at least two games per env
        env.step(random_actions(env, rng))
    assert a.savedir != b.savedir
    assert {pathlib.Path(e.savedir).parent for e in (a, b)} == {savedir}
    assert plain.savedir is None
    for env in (a, b):  # a folder per env: workers never write to the same one
      assert sorted(p.name for p in pathlib.Path(env.savedir).iterdir()) == [
          f'env{j}' for j in range(4)]
      for j in range(4):
        files = [p.name for p in (pathlib.Path(env.savedir) / f'env{j}').iterdir()]
        assert sum('.ttyrec' in f for f in files) >= 2, files

    # A temp dir per batched env, a folder per worker, NLE's scratch folder per env.
    worker_dirs = sorted(tmp.glob('nle-workers-*/worker*'))
    assert [p.name for p in worker_dirs] == ['worker0.0', 'worker1.0'] * 3
    games = [g for d in worker_dirs for g in d.iterdir()]
    assert len(games) == 4 + 4 + 2 and all(g.name.startswith('nle') for g in games)

    os.kill(a.worker_pids[0], signal.SIGKILL)
    a.step(random_actions(a, rng))
    assert a.restarts == 1
    names = {p.name for p in tmp.glob('nle-workers-*/worker*')}
    assert 'worker0.1' in names and len(list(tmp.glob('nle-workers-*/worker0.0'))) == 2

  assert list(tmp.iterdir()) == []
  assert list(cwd.iterdir()) == []
  assert not [p for p in tmp_path.rglob('*ttyrec*') if savedir not in p.parents]
