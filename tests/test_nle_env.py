"""Tests for envs/nle_env.py: NLE stepped in worker processes behind `BatchedEnv`."""

import gc
import logging
import os
import pathlib
import signal
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # repo root, for `envs`

import nle.nethack  # noqa: E402
from envs.nle_env import NLE_ENV_IDS, NLEBatchedEnv, is_nle_env  # noqa: E402

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


def check_replaced(env, before, res, lost):
  """`lost` envs report truncated on the fresh episode, then a reset step."""
  assert env.restarts == 1
  assert res.truncated[lost].all() and not res.terminated[lost].any()
  assert np.all(res.reward[lost] == 0)
  assert not res.truncated[~lost].any()
  nxt = env.step(np.zeros(env.num_envs, np.int64))
  assert np.all(nxt.reward[lost] == 0)
  assert not (nxt.truncated[lost].any() or nxt.terminated[lost].any())
  np.testing.assert_array_equal(nxt.obs['glyphs'][lost], res.obs['glyphs'][lost])
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
      env.step(random_actions(env, rng))
    before = env.worker_pids
    os.kill(before[1], signal.SIGKILL)
    with caplog.at_level(logging.ERROR):
      res = env.step(random_actions(env, rng))
    assert 'exit code -9' in caplog.text
    check_replaced(env, before, res, lost=np.array([False, False, True, True]))


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
  env = make()
  env.reset()
  pids = env.worker_pids
  assert set(pids) <= set(child_pids())
  env.close()
  env.close()  # idempotent
  assert child_pids() == []
  with pytest.raises(RuntimeError):
    env.step(np.zeros(4, np.int64))

  # Forgetting close() still stops the workers once the env is collected.
  env = make(num_envs=2)
  del env
  gc.collect()
  assert child_pids() == []
