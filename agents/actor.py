"""Sebulba actor threads: step a batch of envs, run the policy, send unrolls.

Each actor owns a batched env and a jitted `act` on its actor device. It
collects unrolls of T + 1 steps (the last is the first of the next unroll),
puts them on a bounded queue for the learner, and picks up the newest
parameters the learner published at the start of every unroll.

Besides the env's own keys, every observation carries `prev_action` (int32)
and `prev_reward` (float32, the env's reward, unclipped): what the agent did
and got on the step before, 0 at an episode's first step. IMPALA's core
reads them; torsos ignore them.
"""

import dataclasses
import queue
import threading
from typing import Any, Callable, Dict, Optional

import jax
import numpy as np

from agents.timing import StageTimer
from agents.types import Unroll


class ParamsStore:
  """The learner's latest variables and their version (learner step)."""

  def __init__(self):
    self._lock = threading.Lock()
    self._variables, self._version = None, -1

  def publish(self, variables, version: int) -> None:
    with self._lock:
      self._variables, self._version = variables, version

  def get(self):
    with self._lock:
      return self._variables, self._version


@dataclasses.dataclass
class UnrollBlock:
  """An actor's unroll of all its envs, tagged with the params version used."""
  unroll: Unroll
  params_version: int


@dataclasses.dataclass(frozen=True)
class Episode:
  task_id: int
  episode_return: float    # sum of the env's (scaled, unclipped) rewards
  episode_length: int      # agent steps, reset steps excluded
  stats: Optional[Dict[str, float]] = None  # the env's end-of-game stats (NetHack: score, depth, turns)


def make_act_fn(network):
  """act(variables, obs [B, ...], first [B], core_state, rng) -> action, logits, state, rng."""

  @jax.jit
  def act(variables, obs, first, core_state, rng):
    rng, key = jax.random.split(rng)
    obs = jax.tree.map(lambda x: x[None], obs)
    logits, _, core_state = network.apply(variables, obs, first[None], core_state)
    logits = logits[0]
    action = jax.random.categorical(key, logits)
    return action, logits, core_state, rng

  return act


def host_dtype(dtype) -> np.dtype:
  """The dtype stored in unrolls: JAX runs without 64-bit types by default."""
  dtype = np.dtype(dtype)
  return {np.dtype(np.int64): np.dtype(np.int32),
          np.dtype(np.float64): np.dtype(np.float32)}.get(dtype, dtype)


PREV_KEYS = {'prev_action': ((), np.dtype(np.int32)), 'prev_reward': ((), np.dtype(np.float32))}


def observation_spec_with_prev(env_spec):
  """The env's observation spec plus the keys the actor adds."""
  return {**env_spec, **PREV_KEYS}


class _Buffers:
  """Preallocated host arrays for one unroll [T + 1, B, ...]."""

  def __init__(self, length: int, num_envs: int, num_actions: int, obs_spec):
    shape = (length, num_envs)
    obs_spec = observation_spec_with_prev(obs_spec)
    self.obs = {k: np.zeros(shape + tuple(s), host_dtype(d)) for k, (s, d) in obs_spec.items()}
    self.first = np.zeros(shape, bool)
    self.action = np.zeros(shape, np.int32)
    self.logits = np.zeros(shape + (num_actions,), np.float32)
    self.reward = np.zeros(shape, np.float32)
    self.discount = np.zeros(shape, np.float32)
    self.task_id = np.zeros(shape, np.int32)

  def copy_step(self, src: '_Buffers', src_t: int, dst_t: int) -> None:
    for k in self.obs:
      self.obs[k][dst_t] = src.obs[k][src_t]
    for name in ('first', 'action', 'logits', 'reward', 'discount', 'task_id'):
      getattr(self, name)[dst_t] = getattr(src, name)[src_t]

  def to_unroll(self, core_state) -> Unroll:
    return Unroll(obs=self.obs, first=self.first, action=self.action,
                  behaviour_logits=self.logits, reward=self.reward,
                  discount=self.discount, task_id=self.task_id, core_state=core_state)


class Actor(threading.Thread):
  """One actor thread. Errors are kept in `self.error` for the learner to raise."""

  def __init__(self, actor_id: int, env, act_fn: Callable, initial_state: Any,
               store: ParamsStore, unrolls: queue.Queue, episodes: queue.SimpleQueue,
               timer: StageTimer, stop: threading.Event, unroll_length: int,
               device: jax.Device, seed: int, wait_for_learner: bool = False):
    super().__init__(name=f'actor-{actor_id}', daemon=True)
    self._env, self._act = env, act_fn
    self._initial_state = initial_state
    self._store, self._unrolls, self._episodes = store, unrolls, episodes
    self._timer, self._stop_event = timer, stop
    self._length = unroll_length + 1
    self._device = device
    self._rng = jax.device_put(jax.random.key(seed), device)
    # After queueing an unroll, wait for room in the queue (the learner took
    # a block) before acting again, so the next unroll starts with params
    # about one update behind the update that consumes it: exactly one with
    # one actor and a queue of one; 1 and 2 in turn with two actors (PPO's
    # ratio is taken against the acting policy). False: run ahead by
    # queue_size blocks.
    self._wait_for_learner = wait_for_learner
    self.error: Optional[BaseException] = None
    self.env_steps = 0

  def run(self):
    try:
      self._loop()
    except BaseException as e:  # reported by the learner loop
      self.error = e

  def _put(self, block: UnrollBlock) -> None:
    with self._timer.time('actor_queue_put'):
      while not self._stop_event.is_set():
        try:
          self._unrolls.put(block, timeout=0.5)
          return
        except queue.Full:
          continue

  def _wait_for_room(self) -> None:
    with self._timer.time('actor_wait_learner'):
      while self._unrolls.full() and not self._stop_event.wait(0.002):
        pass

  def _loop(self):
    env, n = self._env, self._env.num_envs
    result = env.reset()
    obs = result.obs
    prev_action = np.zeros((n,), np.int32)
    prev_reward = np.zeros((n,), np.float32)
    first = np.ones((n,), bool)
    terminal = np.zeros((n,), bool)
    ep_return = np.zeros((n,), np.float64)
    ep_length = np.zeros((n,), np.int64)
    state = jax.device_put(self._initial_state, self._device)
    variables, version, local_version = None, -1, None
    buf = _Buffers(self._length, n, env.num_actions, env.observation_spec)
    start_state, t = state, 0
    while not self._stop_event.is_set():
      if variables is None or t == 1:  # the start of every unroll
        variables_host, version = self._store.get()
        if version != local_version:
          variables = jax.device_put(variables_host, self._device)
          local_version = version
      if t == self._length - 1:
        next_start_state = state
      for k, v in obs.items():
        buf.obs[k][t] = v
      buf.obs['prev_action'][t] = np.where(first, 0, prev_action)
      buf.obs['prev_reward'][t] = np.where(first, 0.0, prev_reward)
      buf.first[t] = first
      buf.task_id[t] = result.task_id
      with self._timer.time('inference'):
        action, logits, state, self._rng = self._act(
            variables, {k: buf.obs[k][t] for k in buf.obs}, buf.first[t], state, self._rng)
        buf.action[t] = np.asarray(action)
        buf.logits[t] = np.asarray(logits)
      with self._timer.time('env_step'):
        result = env.step(buf.action[t])
      self.env_steps += n
      buf.reward[t] = result.reward
      buf.discount[t] = 1.0 - result.terminated
      prev_action, prev_reward = buf.action[t].copy(), result.reward

      # The step from a terminal observation is a reset step: no reward, no length.
      live = ~terminal
      ep_return += np.where(live, result.reward, 0.0)
      ep_length += live
      done = result.terminated | result.truncated
      # Logged episodes are whole games: an Atari life lost ends the
      # learner's episode (`done`) but not the game.
      game_ended = result.game_ended
      stats = getattr(result, 'episode_stats', None)
      for i in np.flatnonzero(game_ended & live):
        self._episodes.put(Episode(
            int(result.task_id[i]), float(ep_return[i]), int(ep_length[i]),
            None if stats is None else {k: float(v[i]) for k, v in stats.items()}))
      ep_return[game_ended] = 0.0
      ep_length[game_ended] = 0
      first, terminal, obs = terminal, done, result.obs

      t += 1
      if t == self._length:
        core = jax.tree.map(np.asarray, start_state)
        self._put(UnrollBlock(buf.to_unroll(core), version))
        if self._wait_for_learner:
          self._wait_for_room()
        new = _Buffers(self._length, n, env.num_actions, env.observation_spec)
        new.copy_step(buf, self._length - 1, 0)
        buf, start_state, t = new, next_start_state, 1
