"""NetHack (NLE, Kuttler et al. 2020) behind `BatchedEnv`, stepped in worker processes.

NLE holds the GIL while it steps, so each worker *process* owns a contiguous slice of the envs;
observations, rewards, flags and actions live in one shared-memory block, and only tiny commands
cross the pipes. A worker starts an ended game's next one right after answering, while the policy
works. Workers are spawned (the parent runs JAX threads), so a script that builds this env needs the
`if __name__ == '__main__':` guard. The worker's side is envs/nle_worker.py.

Crashes: a worker that dies, raises or does not answer within `step_timeout_s` is replaced
(`restarts` + 1). That step reports its envs `truncated=True` with reward 0, the new episode's first
observation, and the lost episode's task id and statistics; the next is the usual reset step, so
envs/base.py's auto-reset convention holds throughout.

Task ids: fixed per env, unless `role_task_ids` is given ('@'): then each episode takes the id of
the role dealt, read from the hero's glyph. A step's task id is its observation's episode's: the
game-end step keeps the old id, the reset step carries the new one. Episode statistics (score,
deepest level, turns) are the last live values from blstats.
"""

import contextlib
import dataclasses
import logging
import multiprocessing as mp
import multiprocessing.connection
import os
import select
import shutil
import sys
import tempfile
import threading
import time
import weakref
from typing import List, Optional, Sequence

import gymnasium as gym
import nle  # noqa: F401  (registers the NetHack*-v0 ids with gymnasium)
import nle.nethack
import numpy as np

from envs import nethack
from envs.base import StepResult
from infra.settings import at_least, boolean, setting
from envs.nle_worker import (DERIVED_OBS, EPISODE_STATS, OK, STEP, observation_desc, recv_msg,
                             send_msg, shared_layout, shared_views, worker_main)

log = logging.getLogger(__name__)

NLE_ENV_IDS = tuple(
    env_id for env_id, spec in gym.registry.items()
    if isinstance(spec.entry_point, str) and spec.entry_point.startswith('nle.'))

_START_TRIES = 3        # replacements in a row before we call the failure systematic
_MIN_START_TIMEOUT_S = 60.0  # spawning and building envs may be slow on a busy host


@dataclasses.dataclass(frozen=True)
class NLEConfig:
  """NetHack's worker processes (the config's `nle` group); envs/families.py sizes them."""
  workers: int = setting(0, 'NLE worker processes per actor; 0 = sized to the machine '
                         '(envs/families.py)', at_least(0))
  ttyrecs: bool = setting(False, 'write NLE ttyrecs into <workdir>/nle', boolean)


def is_nle_env(env_id: str) -> bool:
  return env_id in NLE_ENV_IDS


@dataclasses.dataclass
class _Worker:
  process: mp.process.BaseProcess
  conn: mp.connection.Connection
  fd: int  # conn.fileno(), cached: the per-step path reads and writes it directly
  lo: int
  hi: int
  tmpdir: str  # the worker's temp dir, for NLE's scratch folders


def _stop(worker: _Worker) -> None:
  if worker.process.is_alive():
    worker.process.kill()
  worker.process.join(timeout=5.0)
  worker.conn.close()
  # NLE cleans its scratch folders up on close(), but a killed or crashed worker never gets there.
  shutil.rmtree(worker.tmpdir, ignore_errors=True)


def _shutdown(workers: List[Optional[_Worker]], tmpdir: str) -> None:
  """Stops all workers; also run by weakref.finalize if close() never was."""
  alive = [w for w in workers if w is not None]
  for worker in alive:  # ask all first, so they wind down in parallel
    try:
      send_msg(worker.fd, ('close', None))
    except OSError:
      pass
  for worker in alive:
    worker.process.join(timeout=2.0)
    _stop(worker)
  workers[:] = [None] * len(workers)
  shutil.rmtree(tmpdir, ignore_errors=True)


_MAIN_LOCK = threading.Lock()  # workers are restarted from actor threads


@contextlib.contextmanager
def _spawn_without_main():
  """Starts spawned workers without re-importing the launching script, whose __main__ (for
  launch/train.py, JAX and the whole agent) spawn would otherwise run in every child."""
  main = sys.modules.get('__main__')
  with _MAIN_LOCK:
    saved = {k: main.__dict__[k] for k in ('__file__', '__spec__') if main and k in main.__dict__}
    for k in saved:
      if k == '__spec__':
        main.__spec__ = None
      else:
        del main.__dict__[k]
    try:
      yield
    finally:
      if main is not None:
        main.__dict__.update(saved)


class NLEBatchedEnv:
  """`num_envs` NLE envs stepped in `num_workers` processes, EnvPool-style: a BatchedEnv
  (envs/base.py) behaving as the module docstring says, its workers spawned and ready when the
  constructor returns. `episode_stats` holds 'score', 'depth' and 'turns'.

  Args:
    task_ids, env_kwargs, reward_scales: one per env (reward_scales None: all 1).
    observation_keys: NLE observation keys and DERIVED_OBS to give.
    num_workers: worker processes (at most num_envs are used).
    seed: the base seed; each game's seeds derive from it, the env index and its worker's generation
      (a replacement gets new seeds).
    savedir: where ttyrecs go (a new folder per batched env, 'env<i>' per env); None: no ttyrecs.
    step_timeout_s: seconds a worker may take to answer (starting waits at least 60 s).
    role_task_ids: per env, None or one task id per role of nethack.ROLES: the env's episodes take
      the id of the role dealt ('@').

  Raises:
    ValueError: for a bad id, observation key or per-env list, num_envs or num_workers < 1, or envs
      that disagree on the number of actions.
    RuntimeError: when workers fail to start.
  """

  def __init__(self, env_id: str, num_envs: int, task_ids: Sequence[int],
               env_kwargs: Sequence[dict], observation_keys: Sequence[str] = ('glyphs', 'blstats'),
               reward_scales: Optional[Sequence[float]] = None, num_workers: int = 1,
               seed: int = 0, savedir: Optional[str] = None, step_timeout_s: float = 60.0,
               role_task_ids: Optional[Sequence[Optional[Sequence[int]]]] = None):
    if not is_nle_env(env_id):
      raise ValueError(f'{env_id!r} is not an NLE env; known: {NLE_ENV_IDS}')
    known = set(nle.nethack.OBSERVATION_DESC) | set(DERIVED_OBS)
    if not set(observation_keys) <= known:
      raise ValueError(f'unknown NLE observation keys in {observation_keys}; known: {sorted(known)}')
    reward_scales = [1.0] * num_envs if reward_scales is None else reward_scales
    role_task_ids = [None] * num_envs if role_task_ids is None else role_task_ids
    if not (len(task_ids) == len(env_kwargs) == len(reward_scales) == len(role_task_ids)
            == num_envs):
      raise ValueError('task_ids, env_kwargs, reward_scales and role_task_ids need one '
                       'entry per env')
    if any(r is not None and len(r) != len(nethack.ROLES) for r in role_task_ids):
      raise ValueError(f'role_task_ids entries need one task id per role ({len(nethack.ROLES)})')
    if num_envs < 1 or num_workers < 1:
      raise ValueError('num_envs and num_workers must be positive')

    self.num_envs = num_envs
    self.restarts = 0
    self._env_id = env_id
    self._env_kwargs = [dict(kw) for kw in env_kwargs]
    self._task_ids = [int(t) for t in task_ids]
    self._role_task_ids = [None if r is None else tuple(int(t) for t in r) for r in role_task_ids]
    self._keys = tuple(observation_keys)
    self._seed, self._timeout = seed, step_timeout_s
    self._start_timeout = max(step_timeout_s, _MIN_START_TIMEOUT_S)
    self._scales = np.asarray(reward_scales, np.float32)
    self.observation_spec = {k: observation_desc(k) for k in self._keys}
    # A new folder per batched env: actors and env ids sharing one savedir,
    # and reruns into the same workdir, never mix their files.
    self._savedir = None
    if savedir is not None:
      os.makedirs(savedir, exist_ok=True)
      self._savedir = tempfile.mkdtemp(prefix=f'{env_id}-seed{seed}-', dir=savedir)

    # RawArray is an anonymous mapping: there is no name to unlink or leak, and
    # it goes away with the last process that maps it, however that one ends.
    self._layout, size = shared_layout(num_envs, self._keys)
    self._raw = mp.RawArray('B', size)
    views = shared_views(self._raw, self._layout)
    self._obs = {k: views['obs/' + k] for k in self._keys}
    self._reward, self._terminated, self._truncated, self._action, self._task_id = (
        views[k] for k in ('reward', 'terminated', 'truncated', 'action', 'task_id'))
    self._stats = {k: views['stats/' + k] for k in EPISODE_STATS}
    self._task_id[:] = self._task_ids

    self._ctx = mp.get_context('spawn')
    sizes = [len(c) for c in np.array_split(np.arange(num_envs), min(num_workers, num_envs))]
    self._bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    self._generation = [0] * len(sizes)
    self._workers: List[Optional[_Worker]] = [None] * len(sizes)
    self._tmpdir = tempfile.mkdtemp(prefix='nle-workers-')
    self._finalizer = weakref.finalize(self, _shutdown, self._workers, self._tmpdir)
    for w in range(len(sizes)):  # start all before waiting, so they boot in parallel
      self._workers[w] = self._start(w)
    ready, failures = self._gather(range(len(sizes)), self._start_timeout)
    if failures:
      self.close()
      raise RuntimeError('NLE workers failed to start:\n' + '\n'.join(failures.values()))
    if len(set(ready.values())) != 1:
      self.close()
      raise ValueError(f'envs disagree on the number of actions: {ready}')
    self.num_actions = next(iter(ready.values()))

  @property
  def worker_pids(self) -> List[int]:
    """The process ids of the running workers, in worker order."""
    return [w.process.pid for w in self._workers if w is not None]

  @property
  def savedir(self) -> Optional[str]:
    """The folder this env's ttyrecs go to (one subfolder per env), or None."""
    return self._savedir

  def reset(self) -> StepResult:
    """Starts a new game in every env; RuntimeError when closed, or when a
    worker fails to start 3 times in a row."""
    self._command('reset', False)
    return self._result()

  def step(self, actions: np.ndarray) -> StepResult:
    """Steps every env once with int [B] actions, replacing workers that die,
    raise or time out (the module docstring); raises as `reset`."""
    self._action[:] = actions
    self._command('step')
    return self._result()

  def env_attr(self, name: str) -> list:
    """`getattr(env.unwrapped, name)` of every env, None for a worker that failed to answer. Not for
    use mid-training: a worker replaced here starts episodes no step reports as truncated."""
    replies = self._command('getattr', name)
    return [x for w, worker in enumerate(self._workers)
            for x in replies.get(w, [None] * (worker.hi - worker.lo))]

  def close(self) -> None:
    """Stops every worker and removes their temp dirs; later calls do nothing."""
    self._finalizer()

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    self.close()

  def _start(self, w: int) -> _Worker:
    lo, hi = self._bounds[w], self._bounds[w + 1]
    # A replacement gets new seeds (via its generation): the crashed games would likely crash again.
    seeds = [tuple(int(s) >> 1 for s in np.random.SeedSequence(
        [self._seed, j, self._generation[w]]).generate_state(2, np.uint64)) for j in range(lo, hi)]
    savedirs = [None if self._savedir is None else os.path.join(self._savedir, f'env{j}')
                for j in range(lo, hi)]
    tmpdir = os.path.join(self._tmpdir, f'worker{w}.{self._generation[w]}')
    os.mkdir(tmpdir)
    conn, child_conn = self._ctx.Pipe()
    process = self._ctx.Process(
        target=worker_main, name=f'nle-worker-{w}', daemon=True,
        args=(child_conn, self._raw, self._layout, self._env_id, lo, hi,
              self._env_kwargs[lo:hi], self._keys, seeds, savedirs, self._task_ids[lo:hi],
              self._role_task_ids[lo:hi], tmpdir))
    with _spawn_without_main():
      process.start()
    child_conn.close()  # else our recv() would never see EOF when the worker dies
    return _Worker(process, conn, conn.fileno(), lo, hi, tmpdir)

  def _gather(self, ids, timeout: float):
    """Waits for one reply from each worker in `ids`; returns (replies, failures)."""
    # Cheaper per step than mp.connection.wait, which builds a selector per call.
    poller, pending = select.poll(), {self._workers[w].fd: w for w in ids}
    for fd in pending:
      poller.register(fd, select.POLLIN)
    replies, failures = {}, {}
    deadline = time.monotonic() + timeout
    while pending:
      events = poller.poll(max(0.0, deadline - time.monotonic()) * 1000)
      if not events:
        break
      for fd, _ in events:
        w = pending.pop(fd)
        poller.unregister(fd)
        try:
          msg = recv_msg(fd)
          kind, payload = ('ok', None) if msg == OK else msg
        except (EOFError, OSError):
          failures[w] = 'died'
          continue
        if kind == 'error':
          failures[w] = 'raised:\n' + payload
        else:
          replies[w] = payload
    for w in pending.values():
      failures[w] = f'did not answer within {timeout:.1f}s'
    return replies, failures

  def _command(self, cmd: str, arg=None) -> dict:
    if not self._finalizer.alive:
      raise RuntimeError('NLEBatchedEnv is closed')
    failures, sent = {}, []
    for w, worker in enumerate(self._workers):
      try:
        send_msg(worker.fd, STEP if cmd == 'step' else (cmd, arg))
        sent.append(w)
      except OSError:
        failures[w] = 'died'
    replies, more = self._gather(sent, self._timeout)
    failures.update(more)
    for w, why in sorted(failures.items()):
      self._replace(w, why, truncate=cmd != 'reset')
    return replies

  def _replace(self, w: int, why: str, truncate: bool) -> None:
    lo, hi = self._bounds[w], self._bounds[w + 1]
    # What the dead worker last wrote: its lost episodes' task ids and statistics.
    lost_task_id = self._task_id[lo:hi].copy()
    lost_stats = {k: v[lo:hi].copy() for k, v in self._stats.items()}
    for attempt in range(_START_TRIES):
      old = self._workers[w]
      _stop(old)
      if why == 'died':
        why = f'died (exit code {old.process.exitcode})'
      log.error('NLE worker %d (pid %s, envs %d..%d) %s; replacing it (attempt %d).',
                w, old.process.pid, lo, hi - 1, why, attempt + 1)
      self.restarts += 1
      self._generation[w] += 1
      self._workers[w] = self._start(w)
      _, failures = self._gather([w], self._start_timeout)
      if not failures:
        try:
          send_msg(self._workers[w].fd, ('reset', truncate))
          _, failures = self._gather([w], self._start_timeout)
        except OSError:
          failures = {w: 'died'}
      if not failures:
        break
      why = failures[w]
    else:
      raise RuntimeError(f'NLE worker {w} failed {_START_TRIES} times in a row; last: {why}')
    if truncate:
      # The lost episodes end here, logged under their own task and statistics.
      self._truncated[lo:hi] = True
      self._task_id[lo:hi] = lost_task_id
      for k, v in self._stats.items():
        v[lo:hi] = lost_stats[k]

  def _result(self) -> StepResult:
    # Copies: the shared arrays are overwritten by the next step.
    return StepResult(obs={k: v.copy() for k, v in self._obs.items()},
                      reward=self._reward * self._scales,
                      terminated=self._terminated.copy(),
                      truncated=self._truncated.copy(),
                      task_id=self._task_id.copy(),
                      episode_stats={k: v.copy() for k, v in self._stats.items()})
