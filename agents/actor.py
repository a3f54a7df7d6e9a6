"""Sebulba actor threads (Hessel et al. 2021, arXiv 2104.06272): step a batch of envs, run the
policy, send unrolls of T + 1 steps (the last is the first of the next) to the learner on a bounded
queue, picking up the newest published params at the start of every unroll. Step bookkeeping is
agents/rollout.py's, shared with evaluation."""

import dataclasses
import queue
import threading
from typing import Any, Callable, Optional

import jax
import numpy as np

from agents import builder
from agents.rollout import StepBookkeeping, host_dtype, policy_observation_spec
from agents.timing import StageTimer
from envs import registry
from rl.types import Unroll


class ParamsStore:
  """The learner's latest variables and their version (learner step), under one lock; a reference,
  not a copy: a publisher must not mutate what it published."""

  def __init__(self):
    self._lock = threading.Lock()
    self._variables, self._version = None, -1

  def publish(self, variables, version: int) -> None:
    """Replaces the variables (any pytree) and their version."""
    with self._lock:
      self._variables, self._version = variables, version

  def get(self):
    """(variables, version); (None, -1) before the first publish."""
    with self._lock:
      return self._variables, self._version


@dataclasses.dataclass
class UnrollBlock:
  """An actor's unroll of all its envs, tagged with the params version used and the actor."""
  unroll: Unroll
  params_version: int
  actor_id: int = 0


def make_act_fn(network):
  """The actors' jitted policy step for B envs.

  Returns:
    act(variables, obs, first, core_state, rng) -> (action, logits, core_state, rng): obs key ->
    [B, ...], first bool [B]; action int32 [B] sampled from logits [B, A]; the rng to pass next.
  """

  @jax.jit
  def act(variables, obs, first, core_state, rng):
    rng, key = jax.random.split(rng)
    obs = jax.tree.map(lambda x: x[None], obs)
    logits, _, core_state = network.apply(variables, obs, first[None], core_state)
    logits = logits[0]
    action = jax.random.categorical(key, logits)
    return action, logits, core_state, rng

  return act


class _Buffers:
  """Preallocated host arrays for one unroll [T + 1, B, ...]."""

  def __init__(self, length: int, num_envs: int, num_actions: int, obs_spec):
    shape = (length, num_envs)
    obs_spec = policy_observation_spec(obs_spec)
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
  """One actor thread (daemon, 'actor-<id>'); an exception ends it and is kept
  in `error` for the learner to raise.

  Puts UnrollBlocks on `unrolls` (fields [T + 1, B, ...] on the host, core state [B, ...] at the
  first step), finished games on `episodes`, and counts `env_steps`.

  Args:
    unroll_length: T, without the extra step.
    seed: the action sampling seed (builder.actor_seed).
    wait_for_learner: after queueing, wait for queue room, so the next unroll starts with params
      about one update behind the one that consumes it; False: run ahead by queue_size blocks.
  """

  def __init__(self, actor_id: int, env, act_fn: Callable, initial_state: Any,
               store: ParamsStore, unrolls: queue.Queue, episodes: queue.SimpleQueue,
               timer: StageTimer, stop: threading.Event, unroll_length: int,
               device: jax.Device, seed: int, wait_for_learner: bool = False):
    super().__init__(name=f'actor-{actor_id}', daemon=True)
    self.actor_id = actor_id
    self._env, self._act = env, act_fn
    self._initial_state = initial_state
    self._store, self._unrolls, self._episodes = store, unrolls, episodes
    self._timer, self._stop_event = timer, stop
    self._length = unroll_length + 1
    self._device = device
    self._rng = jax.device_put(jax.random.key(seed), device)
    # PPO's ratio is taken against the acting policy, so the lag matters.
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
    book = StepBookkeeping(n)
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
      for k, v in book.policy_inputs(result.task_id).items():
        buf.obs[k][t] = v
      buf.first[t] = book.first
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
      for _, episode in book.record(buf.action[t], result):
        self._episodes.put(episode)
      obs = result.obs

      t += 1
      if t == self._length:
        core = jax.tree.map(np.asarray, start_state)
        self._put(UnrollBlock(buf.to_unroll(core), version, self.actor_id))
        if self._wait_for_learner:
          self._wait_for_room()
        new = _Buffers(self._length, n, env.num_actions, env.observation_spec)
        new.copy_step(buf, self._length - 1, 0)
        buf, start_state, t = new, next_start_state, 1


def make_envs(spec, first_actor: int = 0, env_steps: int = 0, count=None) -> list:
  """The batched envs of this process's actors (the first `count`; None: all).

  Actor i steps spec.plan.actor_env_groups[i], seeded for global actor id
  first_actor + i at `env_steps`, so a resumed run gets fresh games.
  """
  plan = spec.plan
  groups = plan.actor_env_groups if count is None else plan.actor_env_groups[:count]
  return [registry.make_actor_envs(
      g, seed=builder.env_seed(spec.run.seed, first_actor + i, env_steps),
      resources=plan.actors.resources, settings=spec.envs,
      observation_keys=plan.observation_keys, workdir=spec.run.workdir)
      for i, g in enumerate(groups)]


def make_actors(spec, network, envs, store: 'ParamsStore', unrolls: queue.Queue,
                episodes: queue.SimpleQueue, timer: StageTimer, stop: threading.Event,
                rng: jax.Array, env_steps: int = 0, first_actor: int = 0) -> list:
  """The Actor threads of this process, not started: one per env of `envs`,
  on spec.plan.actor_device, seeded from the learner's `rng` at `env_steps`."""
  act = make_act_fn(network)
  return [Actor(first_actor + i, e, act, network.initial_state(e.num_envs), store, unrolls,
                episodes, timer, stop, spec.run.unroll_length, spec.plan.actor_device,
                seed=builder.actor_seed(rng, env_steps, first_actor + i),
                wait_for_learner=spec.actors.wait_for_learner)
          for i, e in enumerate(envs)]
