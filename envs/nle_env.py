"""NetHack (NLE) behind the `BatchedEnv` interface, stepped in worker processes.

NLE holds the GIL while it steps, so threads would not run in parallel: each
worker *process* owns a contiguous slice of the envs. Observations, rewards,
flags and actions live in one shared-memory block that the parent and every
worker map, so only tiny command messages cross the pipes. A step writes the
actions, sends `step` to every worker, then waits for all of them. A worker
starts the next game of an env whose game just ended right after answering,
while the parent and the policy work: a reset costs dozens of steps. Workers
are spawned (the parent runs JAX threads, so forking it is unsafe), which means
a script that builds this env needs the `if __name__ == '__main__':` guard.

NLE segfaults now and then on long runs. A worker that dies, raises or does not
answer within `step_timeout_s` is killed (its traceback, if any, is logged) and
replaced, and `restarts` goes up by one. The replacement starts new episodes, so
that step reports the worker's envs as `truncated=True` with reward 0 and the
*new* episode's first observation (the old episode's last one is lost with the
worker; bootstrapping from a fresh start is a small, rare bias). The step after
is the usual reset step (action ignored, reward 0, flags False, that same first
observation), so the auto-reset convention of `envs/base.py` holds throughout.
That truncation step still reports the lost episode's task id and episode
statistics (the last ones the dead worker wrote), so the lost game is logged as
ended under its own task; the reset step after it reports the new episode's.

Task ids. Each env has a fixed task id, unless it is given `role_task_ids`
(envs playing random characters, '@'): then each episode takes the task id of
the role the game dealt, read from the hero's glyph in the episode's first
observation. A step's task id is that of the episode its observation belongs
to: the game-end step keeps the old episode's id, the reset step after it
carries the new one.

Episode statistics. Every step also reports, per env, the in-game score, the
deepest dungeon level reached and the game turn of the episode so far, read
from blstats; at a game end they are the ended game's final ones. NLE blanks
the observation once a game is over, so the last live values are kept.

Files. NLE makes a scratch folder per game instance (lock files, record, save/)
in the temp dir; each worker gets its own temp dir, removed by the parent when
the worker stops, even if it crashed. Ttyrecs are written only when `savedir`
is given, into a new folder per batched env under it.
"""

import dataclasses
import logging
import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import select
import shutil
import signal
import struct
import tempfile
import time
import traceback
import weakref
from typing import Dict, List, Optional, Sequence

import gymnasium as gym
import nle  # noqa: F401  (registers the NetHack*-v0 ids with gymnasium)
import nle.nethack
import numpy as np

from envs import nethack
from envs.base import StepResult

log = logging.getLogger(__name__)

NLE_ENV_IDS = tuple(
    env_id for env_id, spec in gym.registry.items()
    if isinstance(spec.entry_point, str) and spec.entry_point.startswith('nle.'))

_ALIGN = 64             # keeps every shared array cache-line aligned
_START_TRIES = 3        # replacements in a row before we call the failure systematic
_MIN_START_TIMEOUT_S = 60.0  # spawning and building envs may be slow on a busy host
_RUNNING, _NEEDS_RESET, _FRESH = 0, 1, 2  # per-env state inside a worker
EPISODE_STATS = ('score', 'depth', 'turns')  # StepResult.episode_stats keys
_SCORE, _DEPTH, _TIME = (nle.nethack.NLE_BL_SCORE, nle.nethack.NLE_BL_DEPTH,  # blstats fields
                          nle.nethack.NLE_BL_TIME)


def is_nle_env(env_id: str) -> bool:
  return env_id in NLE_ENV_IDS


# The per-step round trip is one byte each way (_STEP, then _OK); any other
# message is pickled and framed after _MSG. Bare os.read/os.write on the pipe
# cost a fraction of Connection.send_bytes/recv_bytes, and the parent's share
# of every step is time the workers sit idle.
_STEP, _OK, _MSG = b'S', b'K', b'M'


def _send(fd: int, msg) -> None:
  if isinstance(msg, bytes):
    os.write(fd, msg)
    return
  data = pickle.dumps(msg)
  view = memoryview(_MSG + struct.pack('<I', len(data)) + data)
  while view:
    view = view[os.write(fd, view):]


def _read(fd: int, size: int) -> bytes:
  data = b''
  while len(data) < size:
    chunk = os.read(fd, size - len(data))
    if not chunk:
      raise EOFError
    data += chunk
  return data


def _recv(fd: int):
  head = _read(fd, 1)
  if head != _MSG:
    return head
  return pickle.loads(_read(fd, struct.unpack('<I', _read(fd, 4))[0]))


def _layout(num_envs: int, observation_keys: Sequence[str]):
  """(name, byte offset, shape, dtype) of each shared array, and the total size."""
  desc = nle.nethack.OBSERVATION_DESC
  fields = [('obs/' + k, tuple(desc[k]['shape']), desc[k]['dtype']) for k in observation_keys]
  fields += [('reward', (), np.float32), ('terminated', (), np.bool_),
             ('truncated', (), np.bool_), ('action', (), np.int64), ('task_id', (), np.int32)]
  fields += [('stats/' + k, (), np.float32) for k in EPISODE_STATS]
  layout, offset = [], 0
  for name, shape, dtype in fields:
    shape, dtype = (num_envs,) + shape, np.dtype(dtype)
    layout.append((name, offset, shape, dtype.str))
    offset += -(-int(np.prod(shape)) * dtype.itemsize // _ALIGN) * _ALIGN
  return layout, max(offset, 1)


def _views(raw, layout, lo: int = 0, hi: Optional[int] = None) -> Dict[str, np.ndarray]:
  """Numpy views of the shared block, restricted to envs [lo, hi)."""
  buf = np.frombuffer(raw, dtype=np.uint8)
  return {name: buf[off:off + int(np.prod(shape)) * np.dtype(dt).itemsize].view(dt)
          .reshape(shape)[lo:hi] for name, off, shape, dt in layout}


def _make_env(env_id: str, kwargs: dict, observation_keys, savedir: Optional[str]):
  kwargs = dict(kwargs)
  max_steps = kwargs.pop('max_episode_steps', None)
  kwargs.pop('savedir', None)
  if savedir is None:
    kwargs['save_ttyrec_every'] = 0
  else:
    kwargs['savedir'] = savedir
    kwargs.setdefault('save_ttyrec_every', 1)
  env = gym.make(env_id, observation_keys=tuple(observation_keys),
                 max_episode_steps=max_steps, disable_env_checker=True, **kwargs)
  if max_steps is not None:
    # gym.make keeps `max_episode_steps` for its TimeLimit wrapper; NLE has its
    # own cap (5000 by default) that would otherwise cut longer episodes first.
    env.unwrapped._max_episode_steps = max_steps
  return env


def _monster_roles() -> Dict[int, int]:
  """Monster index -> index in `nethack.ROLES` of the role whose hero it draws."""
  roles = {}
  for m in range(nle.nethack.NUMMONS):
    role = nethack.role_of_monster(nle.nethack.permonst(m).mname)
    if role is not None:
      roles[m] = nethack.ROLES.index(role)
  return roles


def _hero_role(glyphs: np.ndarray, blstats: np.ndarray, monster_roles: Dict[int, int]) -> int:
  """Index in `nethack.ROLES` of the hero's role, at the start of an episode.

  The hero is drawn as its role's monster ('cavewoman', 'priest', ...) until it
  polymorphs, so this holds for every new game (checked over thousands of '@'
  resets). The welcome message ('You are a neutral male gnomish Wizard.') is
  no substitute: about 5% of games start with another message in its place.
  """
  glyph = int(glyphs[blstats[nle.nethack.NLE_BL_Y], blstats[nle.nethack.NLE_BL_X]])
  role = None
  if nle.nethack.glyph_is_monster(glyph):
    role = monster_roles.get(nle.nethack.glyph_to_mon(glyph))
  if role is None:
    raise RuntimeError(f'cannot tell the role of the hero drawn as glyph {glyph} (NetHack '
                       "option 'showrace' draws the race instead; it must stay off)")
  return role


def _worker_main(conn, raw, layout, env_id, lo, hi, env_kwargs, observation_keys, seeds,
                 savedirs, task_ids, role_task_ids, tmpdir):
  # Ctrl-C reaches the whole process group; the parent decides how to shut down.
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  # NLE's per-game scratch folders go here; the parent removes it, crash or not.
  tempfile.tempdir = tmpdir
  envs = []
  try:
    views = _views(raw, layout, lo, hi)
    obs_views = [(k[4:], v) for k, v in views.items() if k.startswith('obs/')]
    reward, term, trunc, action, task_out = (
        views[k] for k in ('reward', 'terminated', 'truncated', 'action', 'task_id'))
    stats_out = [views['stats/' + k] for k in EPISODE_STATS]
    # Role detection and episode statistics read glyphs and blstats whatever the
    # network asked for. NLE computes both (and the message) on every step for
    # its own use anyway, so asking costs nothing; only `observation_keys`
    # reach shared memory, i.e. the parent's observations.
    keys = tuple(dict.fromkeys(tuple(observation_keys) + ('glyphs', 'blstats')))
    for kwargs, (core, disp), savedir in zip(env_kwargs, seeds, savedirs):
      env = _make_env(env_id, kwargs, keys, savedir)
      # NLE ignores reset(seed=...): NetHack's own RNGs are set here and apply
      # from the next reset on; reseed=False keeps runs reproducible.
      env.unwrapped.seed(core, disp, reseed=False)
      envs.append(env)
    n = len(envs)
    state = [_NEEDS_RESET] * n
    monster_roles = _monster_roles() if any(r is not None for r in role_task_ids) else {}
    # Per-env values as Python lists (cheaper per element than numpy scalars),
    # written to shared memory once per command. After a replacement the
    # parent overwrites task ids and statistics once, for the truncation step.
    rewards, terms, truncs = [0.0] * n, [False] * n, [False] * n
    task = list(task_ids)
    stats = [[0.0] * len(EPISODE_STATS) for _ in range(n)]  # score, depth, turns
    ahead = {}  # env -> its next game, reset while the parent had the last step

    def new_game(i):
      # No copy of the observation: NLE reuses its arrays only when this env
      # steps again, which comes after `begin` has written them out.
      obs = envs[i].reset()[0]
      bl = obs['blstats']
      role_ids = role_task_ids[i]
      t = (task_ids[i] if role_ids is None else
           role_ids[_hero_role(obs['glyphs'], bl, monster_roles)])
      return obs, t, [float(bl[_SCORE]), float(bl[_DEPTH]), float(bl[_TIME])]

    def begin(i, game):
      obs, task[i], stats[i] = game
      for key, view in obs_views:
        view[i] = obs[key]

    def publish():
      reward[:], term[:], trunc[:], task_out[:] = rewards, terms, truncs, task
      for j, out in enumerate(stats_out):
        out[:] = [s[j] for s in stats]

    fd = conn.fileno()
    _send(fd, ('ready', int(envs[0].action_space.n)))
    while True:
      msg = _recv(fd)
      cmd, arg = ('step', None) if msg == _STEP else msg
      reply = None
      if cmd == 'close':
        break
      elif cmd == 'reset':
        ahead.clear()
        for i in range(n):
          begin(i, new_game(i))
          rewards[i], terms[i], truncs[i] = 0.0, False, False
        state = [_FRESH if arg else _RUNNING] * n
        publish()
      elif cmd == 'step':
        for i, (env, a) in enumerate(zip(envs, action.tolist())):
          if state[i] == _RUNNING:
            obs, r, te, tr, _ = env.step(a)
            for key, view in obs_views:  # NLE reuses its arrays, so copy right away
              view[i] = obs[key]
            bl = obs['blstats']
            depth = bl[_DEPTH]
            if depth:  # a live game: NLE blanks blstats once the game is over
              s = stats[i]
              s[0], s[2] = float(bl[_SCORE]), float(bl[_TIME])
              if depth > s[1]:
                s[1] = float(depth)
            # At its step cap NLE quits the game, so it reports terminated too;
            # a time limit must stay a bootstrapped truncation.
            rewards[i], terms[i], truncs[i] = r, te and not tr, tr
            state[i] = _NEEDS_RESET if te or tr else _RUNNING
          else:
            if state[i] == _NEEDS_RESET:
              begin(i, ahead.pop(i) if i in ahead else new_game(i))
            rewards[i], terms[i], truncs[i] = 0.0, False, False
            state[i] = _RUNNING
        publish()
      elif cmd == 'getattr':
        reply = [getattr(env.unwrapped, arg) for env in envs]
      _send(fd, _OK if reply is None else ('ok', reply))
      if cmd == 'step':
        # Games that just ended start over now, while the parent and the policy
        # work on this step, not in the next one: a reset costs dozens of steps.
        for i in range(n):
          if state[i] == _NEEDS_RESET and i not in ahead:
            ahead[i] = new_game(i)
  except (EOFError, KeyboardInterrupt):
    pass  # the parent is gone
  except Exception:  # pylint: disable=broad-except
    try:
      _send(conn.fileno(), ('error', traceback.format_exc()))
    except OSError:
      pass
  finally:
    for env in envs:
      env.close()


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
  # NLE cleans its scratch folders up on close(), but a killed or crashed worker
  # never gets there.
  shutil.rmtree(worker.tmpdir, ignore_errors=True)


def _shutdown(workers: List[Optional[_Worker]], tmpdir: str) -> None:
  """Stops all workers; also run by weakref.finalize if close() never was."""
  alive = [w for w in workers if w is not None]
  for worker in alive:  # ask all first, so they wind down in parallel
    try:
      _send(worker.fd, ('close', None))
    except OSError:
      pass
  for worker in alive:
    worker.process.join(timeout=2.0)
    _stop(worker)
  workers[:] = [None] * len(workers)
  shutil.rmtree(tmpdir, ignore_errors=True)


class NLEBatchedEnv:
  """`num_envs` NLE envs stepped in `num_workers` processes, EnvPool-style.

  `role_task_ids[i]`, if given and not None, makes env i take each episode's
  task id from the role the game dealt: `role_task_ids[i][r]` for role
  `nethack.ROLES[r]` (for envs with character '@'); `task_ids[i]` is then only
  reported before the first reset.
  """

  def __init__(self, env_id: str, num_envs: int, task_ids: Sequence[int],
               env_kwargs: Sequence[dict], observation_keys: Sequence[str] = ('glyphs', 'blstats'),
               reward_scales: Optional[Sequence[float]] = None, num_workers: int = 1,
               seed: int = 0, savedir: Optional[str] = None, step_timeout_s: float = 60.0,
               role_task_ids: Optional[Sequence[Optional[Sequence[int]]]] = None):
    if not is_nle_env(env_id):
      raise ValueError(f'{env_id!r} is not an NLE env; known: {NLE_ENV_IDS}')
    desc = nle.nethack.OBSERVATION_DESC
    if not set(observation_keys) <= set(desc):
      raise ValueError(f'unknown NLE observation keys in {observation_keys}')
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
    self.observation_spec = {k: (tuple(desc[k]['shape']), np.dtype(desc[k]['dtype']))
                             for k in self._keys}
    # A new folder per batched env: actors and env ids sharing one savedir,
    # and reruns into the same workdir, never mix their files.
    self._savedir = None
    if savedir is not None:
      os.makedirs(savedir, exist_ok=True)
      self._savedir = tempfile.mkdtemp(prefix=f'{env_id}-seed{seed}-', dir=savedir)

    # RawArray is an anonymous mapping: there is no name to unlink or leak, and
    # it goes away with the last process that maps it, however that one ends.
    self._layout, size = _layout(num_envs, self._keys)
    self._raw = mp.RawArray('B', size)
    views = _views(self._raw, self._layout)
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
    return [w.process.pid for w in self._workers if w is not None]

  @property
  def savedir(self) -> Optional[str]:
    """The folder this env's ttyrecs go to (one subfolder per env), or None."""
    return self._savedir

  def reset(self) -> StepResult:
    self._command('reset', False)
    return self._result()

  def step(self, actions: np.ndarray) -> StepResult:
    self._action[:] = actions
    self._command('step')
    return self._result()

  def env_attr(self, name: str) -> list:
    """Debugging aid: `getattr(env.unwrapped, name)` of every env, in env order.

    Not for use mid-training: a worker replaced during this call starts new
    episodes that no step reports as truncated.
    """
    replies = self._command('getattr', name)
    return [x for w, worker in enumerate(self._workers)
            for x in replies.get(w, [None] * (worker.hi - worker.lo))]

  def close(self) -> None:
    self._finalizer()

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    self.close()

  def _start(self, w: int) -> _Worker:
    lo, hi = self._bounds[w], self._bounds[w + 1]
    # A replacement gets new seeds (via its generation): replaying the crashed
    # games would likely crash again.
    seeds = [tuple(int(s) >> 1 for s in np.random.SeedSequence(
        [self._seed, j, self._generation[w]]).generate_state(2, np.uint64)) for j in range(lo, hi)]
    savedirs = [None if self._savedir is None else os.path.join(self._savedir, f'env{j}')
                for j in range(lo, hi)]
    tmpdir = os.path.join(self._tmpdir, f'worker{w}.{self._generation[w]}')
    os.mkdir(tmpdir)
    conn, child_conn = self._ctx.Pipe()
    process = self._ctx.Process(
        target=_worker_main, name=f'nle-worker-{w}', daemon=True,
        args=(child_conn, self._raw, self._layout, self._env_id, lo, hi,
              self._env_kwargs[lo:hi], self._keys, seeds, savedirs, self._task_ids[lo:hi],
              self._role_task_ids[lo:hi], tmpdir))
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
          msg = _recv(fd)
          kind, payload = ('ok', None) if msg == _OK else msg
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
        _send(worker.fd, _STEP if cmd == 'step' else (cmd, arg))
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
          _send(self._workers[w].fd, ('reset', truncate))
          _, failures = self._gather([w], self._start_timeout)
        except OSError:
          failures = {w: 'died'}
      if not failures:
        break
      why = failures[w]
    else:
      raise RuntimeError(f'NLE worker {w} failed {_START_TRIES} times in a row; last: {why}')
    if truncate:
      # The lost episodes end here (truncated); they are logged under their
      # own task with their last statistics. The new worker reports the new
      # episodes' values from the next (reset) step on.
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
