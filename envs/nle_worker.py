"""The worker-process side of envs/nle_env.py (whose docstring holds the conventions): NLE envs
stepped in a child process, writing into the parent's shared-memory block, and the pipe protocol."""

import os
import pickle
import signal
import struct
import tempfile
import traceback
from typing import Dict, Optional, Sequence

import gymnasium as gym
import nle  # noqa: F401  (registers the NetHack*-v0 ids with gymnasium)
import nle.nethack
import numpy as np

from envs import nethack

_ALIGN = 64             # keeps every shared array cache-line aligned
_RUNNING, _NEEDS_RESET, _FRESH = 0, 1, 2  # per-env state inside a worker
EPISODE_STATS = ('score', 'depth', 'turns')  # StepResult.episode_stats keys
_SCORE, _DEPTH, _TIME = (nle.nethack.NLE_BL_SCORE, nle.nethack.NLE_BL_DEPTH,  # blstats fields
                          nle.nethack.NLE_BL_TIME)
_X, _Y = nle.nethack.NLE_BL_X, nle.nethack.NLE_BL_Y

# Observations the worker derives, beside NLE's own (name -> (shape, dtype)). under_hero: the glyph
# the hero stands on (its own glyph hides it) as the previous map showed it (UnderHero).
DERIVED_OBS = {'under_hero': ((), np.int16)}


def observation_desc(key: str):
  """(shape without the batch axis, numpy dtype) of an NLE or DERIVED_OBS
  observation key; KeyError for others."""
  if key in DERIVED_OBS:
    shape, dtype = DERIVED_OBS[key]
    return tuple(shape), np.dtype(dtype)
  desc = nle.nethack.OBSERVATION_DESC[key]
  return tuple(desc['shape']), np.dtype(desc['dtype'])


class UnderHero:
  """Tracks DERIVED_OBS['under_hero'] for one env from its glyphs and blstats."""

  def __init__(self):
    self._glyphs = np.zeros(nle.nethack.DUNGEON_SHAPE, np.int16)
    self.value = nle.nethack.NO_GLYPH
    self._where = None  # (x, y, depth) of the previous observation

  def reset(self, glyphs: np.ndarray, blstats: np.ndarray) -> int:
    """Starts a game from its first observation: NO_GLYPH, nothing known yet."""
    self.value = nle.nethack.NO_GLYPH
    self._remember(glyphs, blstats)
    return self.value

  def step(self, glyphs: np.ndarray, blstats: np.ndarray) -> int:
    """The glyph under the hero after a step: the previous map's glyph at a new position, unchanged
    while the hero stays or once the game is over (depth 0), NO_GLYPH after a change of level."""
    x, y, depth = int(blstats[_X]), int(blstats[_Y]), int(blstats[_DEPTH])
    if not depth:  # the game is over: NLE blanks the observation
      return self.value
    if self._where is None or depth != self._where[2]:
      self.value = nle.nethack.NO_GLYPH
    elif (x, y) != self._where[:2]:
      self.value = int(self._glyphs[y, x])
    self._remember(glyphs, blstats)
    return self.value

  def _remember(self, glyphs, blstats):
    np.copyto(self._glyphs, glyphs)
    self._where = (int(blstats[_X]), int(blstats[_Y]), int(blstats[_DEPTH]))


# The per-step round trip is one byte each way (STEP, then OK), with bare
# os.read/os.write: the parent's share of every step is time the workers idle.
STEP, OK, _MSG = b'S', b'K', b'M'


def send_msg(fd: int, msg) -> None:
  """Writes one message to a pipe: STEP or OK as they are, anything else pickled and framed as _MSG,
  a little-endian uint32 length, the pickle. OSError when the pipe is broken."""
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


def recv_msg(fd: int):
  """Reads one message `send_msg` wrote (bytes STEP or OK, or the object),
  blocking; EOFError when the pipe closes."""
  head = _read(fd, 1)
  if head != _MSG:
    return head
  return pickle.loads(_read(fd, struct.unpack('<I', _read(fd, 4))[0]))


def shared_layout(num_envs: int, observation_keys: Sequence[str]):
  """Where each array of the shared-memory block lies: 'obs/<key>' per observation key, 'reward',
  'terminated', 'truncated', 'action', 'task_id' and 'stats/<name>' per EPISODE_STATS, each with a
  leading axis of `num_envs`, 64-byte aligned.

  Returns:
    (layout, size): a list of (name, byte offset, shape, dtype string), and the block's total bytes
    (at least 1).
  """
  fields = [('obs/' + k,) + observation_desc(k) for k in observation_keys]
  fields += [('reward', (), np.float32), ('terminated', (), np.bool_),
             ('truncated', (), np.bool_), ('action', (), np.int64), ('task_id', (), np.int32)]
  fields += [('stats/' + k, (), np.float32) for k in EPISODE_STATS]
  layout, offset = [], 0
  for name, shape, dtype in fields:
    shape, dtype = (num_envs,) + shape, np.dtype(dtype)
    layout.append((name, offset, shape, dtype.str))
    offset += -(-int(np.prod(shape)) * dtype.itemsize // _ALIGN) * _ALIGN
  return layout, max(offset, 1)


def shared_views(raw, layout, lo: int = 0, hi: Optional[int] = None) -> Dict[str, np.ndarray]:
  """Array name -> a numpy view (no copy) of its rows for envs [lo, hi) of the shared block."""
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
  """Index in `nethack.ROLES` of the hero's role at an episode's start, from the hero's glyph (its
  role's monster until it polymorphs; some games start without the welcome message)."""
  glyph = int(glyphs[blstats[nle.nethack.NLE_BL_Y], blstats[nle.nethack.NLE_BL_X]])
  role = None
  if nle.nethack.glyph_is_monster(glyph):
    role = monster_roles.get(nle.nethack.glyph_to_mon(glyph))
  if role is None:
    raise RuntimeError(f'cannot tell the role of the hero drawn as glyph {glyph} (NetHack '
                       "option 'showrace' draws the race instead; it must stay off)")
  return role


def worker_main(conn, raw, layout, env_id, lo, hi, env_kwargs, observation_keys, seeds,
                 savedirs, task_ids, role_task_ids, tmpdir):
  """The worker process's target: steps envs lo..hi-1 on the parent's commands.

  Sends ('ready', number of actions), then answers each command with OK (('ok', reply) for getattr)
  once its results are in shared memory: STEP, ('reset', truncate: the next step repeats the first
  observation), ('getattr', name), ('close', None). An exception is sent as ('error', traceback) and
  ends the worker; a closed pipe ends it silently. SIGINT is ignored.

  Args:
    env_kwargs: each env's gymnasium kwargs ('max_episode_steps' replaces NLE's own cap; 'savedir'
      is ignored).
    seeds: each env's (core, disp) NetHack seeds.
    savedirs: each env's ttyrec folder, or None.
    role_task_ids: each env's task id per role of nethack.ROLES, or None.
    tmpdir: the temp dir for NLE's scratch folders (the parent removes it).
  """
  # Ctrl-C reaches the whole process group; the parent decides how to shut down.
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  tempfile.tempdir = tmpdir
  envs = []
  try:
    views = shared_views(raw, layout, lo, hi)
    obs_views = [(k[4:], v) for k, v in views.items()
                 if k.startswith('obs/') and k[4:] not in DERIVED_OBS]
    under_view = views.get('obs/under_hero')
    reward, term, trunc, action, task_out = (
        views[k] for k in ('reward', 'terminated', 'truncated', 'action', 'task_id'))
    stats_out = [views['stats/' + k] for k in EPISODE_STATS]
    # Role detection and episode statistics read glyphs and blstats whatever the network asked for
    # (NLE computes them anyway); only `observation_keys` reach shared memory.
    keys = tuple(dict.fromkeys(tuple(k for k in observation_keys if k not in DERIVED_OBS)
                               + ('glyphs', 'blstats')))
    for kwargs, (core, disp), savedir in zip(env_kwargs, seeds, savedirs):
      env = _make_env(env_id, kwargs, keys, savedir)
      # NLE ignores reset(seed=...): NetHack's own RNGs are set here and apply
      # from the next reset on; reseed=False keeps runs reproducible.
      env.unwrapped.seed(core, disp, reseed=False)
      envs.append(env)
    n = len(envs)
    state = [_NEEDS_RESET] * n
    under = [UnderHero() for _ in range(n)] if under_view is not None else None
    monster_roles = _monster_roles() if any(r is not None for r in role_task_ids) else {}
    # Per-env values as Python lists (cheaper per element than numpy scalars),
    # written to shared memory once per command.
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
      if under is not None:  # before the next reset reuses NLE's arrays
        under[i].reset(obs['glyphs'], bl)
      return obs, t, [float(bl[_SCORE]), float(bl[_DEPTH]), float(bl[_TIME])]

    def begin(i, game):
      obs, task[i], stats[i] = game
      for key, view in obs_views:
        view[i] = obs[key]
      if under is not None:  # new_game reset it
        under_view[i] = under[i].value

    def publish():
      reward[:], term[:], trunc[:], task_out[:] = rewards, terms, truncs, task
      for j, out in enumerate(stats_out):
        out[:] = [s[j] for s in stats]

    fd = conn.fileno()
    send_msg(fd, ('ready', int(envs[0].action_space.n)))
    while True:
      msg = recv_msg(fd)
      cmd, arg = ('step', None) if msg == STEP else msg
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
            if under is not None:
              under_view[i] = under[i].step(obs['glyphs'], bl)
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
      send_msg(fd, OK if reply is None else ('ok', reply))
      if cmd == 'step':
        # Games that just ended start over now, while the parent and the policy
        # work on this step: a reset costs many steps' time.
        for i in range(n):
          if state[i] == _NEEDS_RESET and i not in ahead:
            ahead[i] = new_game(i)
  except (EOFError, KeyboardInterrupt):
    return  # the parent closed the pipe (or is exiting): nothing to report to
  except Exception:  # pylint: disable=broad-except
    try:
      send_msg(conn.fileno(), ('error', traceback.format_exc()))
    except OSError:
      pass
  finally:
    for env in envs:
      env.close()
