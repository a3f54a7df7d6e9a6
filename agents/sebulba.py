"""The Sebulba training loop: actor threads feed a sharded, jitted learner.

`Trainer` builds envs, network, learner state and actors from a config and
its RunPlan; `run()` consumes unroll blocks, updates, publishes params, and
hands a metrics dict to a callback at every log step. Side effects (threads,
envs) live here; the math is in `losses`, `learner` and `popart`.
"""

import collections
import queue
import threading
import time
from typing import Callable, Dict, List

from absl import logging
import jax
import numpy as np

from agents import learner as learner_lib
from agents.action_stats import ActionStats
from agents.checkpoint import Checkpointer
from agents import losses
from agents.actor import (Actor, ParamsStore, UnrollBlock, host_dtype, make_act_fn,
                          observation_spec_with_prev)
from agents.timing import StageTimer
from agents.types import Unroll
from envs import atari
from envs import registry
from networks import agent as agent_net


class ActorFailed(RuntimeError):
  pass


def concat_blocks(blocks: List[UnrollBlock]) -> Unroll:
  """Actor blocks side by side along the batch axis (axis 1; 0 for core state)."""
  unrolls = [b.unroll for b in blocks]
  if len(unrolls) == 1:
    return unrolls[0]
  core = jax.tree.map(lambda *xs: np.concatenate(xs, axis=0), *[u.core_state for u in unrolls])
  rest = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1),
                      *[u._replace(core_state=None) for u in unrolls])
  return rest._replace(core_state=core)


class Trainer:

  def __init__(self, config, plan):
    self.config, self.plan = config, plan
    self.timer = StageTimer()
    self.stop = threading.Event()
    a = config.actors
    self.checkpointer = Checkpointer(config.workdir, config.keep_intermediate)
    # A resumed run continues from its latest checkpoint; its envs and actors
    # get fresh seeds (offset by the env step) rather than replaying the start.
    self.resumed_from = self.checkpointer.latest_step()
    offset = self.resumed_from or 0
    self.envs = [registry.make_actor_envs(
        groups, seed=(config.seed * 100_003 + 1_009 * i + offset) % 2**31,
        envpool_threads=a.envpool_threads,
        nle_workers=a.nle_workers, observation_keys=plan.observation_keys,
        nle_savedir=(f'{config.workdir}/nle' if a.nle_ttyrecs else None))
        for i, groups in enumerate(plan.actor_env_groups)]
    env = self.envs[0]
    self.network = agent_net.make_network(config.network, env.num_actions, plan.num_values)
    example = {k: np.zeros(s, host_dtype(d))
               for k, (s, d) in observation_spec_with_prev(env.observation_spec).items()}
    variables = agent_net.init_variables(self.network, jax.random.key(config.seed), example)

    optimizer, self.schedule = learner_lib.optimizer_from_config(config, plan.total_learner_steps)
    self.mesh = learner_lib.make_mesh(plan.learner_devices)
    self.state = learner_lib.init_state(variables, optimizer, self.mesh)
    self.rng = jax.random.key(config.seed)
    self.env_steps = 0
    if self.resumed_from is not None:
      restored = self.checkpointer.restore(self.state, self.resumed_from)
      self.state, self.env_steps, self.rng = (
          restored['state'], restored['env_steps'], restored['rng'])
    self._next_checkpoint = self._checkpoint_after(self.env_steps)
    loss_cfg = losses.config_from(config)
    self.update = learner_lib.build_update(
        agent_net.apply_fn(self.network), optimizer, self.schedule, loss_cfg,
        agent_net.VALUE_HEAD, self.mesh, config.optimizer.max_grad_norm)

    self.store = ParamsStore()
    self.unrolls = queue.Queue(maxsize=a.queue_size)
    self.episodes = queue.SimpleQueue()
    act = make_act_fn(self.network)
    self.actors = [
        Actor(i, e, act, self.network.initial_state(e.num_envs), self.store, self.unrolls,
              self.episodes, self.timer, self.stop, config.unroll_length,
              plan.actor_device, seed=self._actor_seed(i))
        for i, e in enumerate(self.envs)]
    self._latest_hns: Dict[str, float] = {}
    self._latest_returns: Dict[str, float] = {}
    group = plan.actor_env_groups[0][0]
    self.action_names = registry.action_names(group.env_id, group.env_kwargs, env.num_actions)
    self.action_stats = ActionStats(plan.num_tasks, env.num_actions)

  def _actor_seed(self, i: int) -> int:
    key = jax.random.fold_in(jax.random.fold_in(self.rng, self.env_steps), i)
    return int(jax.random.randint(key, (), 0, 2**31 - 1))

  def _checkpoint_after(self, env_steps: int) -> float:
    every = self.config.checkpoint_every_steps
    return (env_steps // every + 1) * every if every else float('inf')

  def save_checkpoint(self) -> None:
    """Saves the learner state at the current env step (once per step)."""
    self.checkpointer.save(self.env_steps, self.state, self.rng)

  def _variables(self):
    return {'params': self.state.params, 'popart': self.state.popart}

  def _next_block(self) -> UnrollBlock:
    with self.timer.time('learner_queue_get'):
      while True:
        try:
          return self.unrolls.get(timeout=1.0)
        except queue.Empty:
          for actor in self.actors:
            if actor.error is not None:
              raise ActorFailed(f'{actor.name} failed: {actor.error!r}') from actor.error
            if not actor.is_alive():
              raise ActorFailed(f'{actor.name} stopped unexpectedly')

  def run(self, on_log: Callable[[Dict], None]):
    """Trains until total_env_steps; returns the final learner state."""
    config, plan = self.config, self.plan
    version = int(self.state.step)
    if self.config.keep_intermediate and self.env_steps == 0:
      self.save_checkpoint()  # the initialisation, for analyses of training
    self.store.publish(self._variables(), version)
    for actor in self.actors:
      actor.start()
    window: List[Dict] = []
    lags: List[int] = []
    last_log = time.perf_counter()
    last_steps = self.env_steps
    try:
      while self.env_steps < config.total_env_steps and not self.stop.is_set():
        blocks = [self._next_block() for _ in range(plan.blocks_per_batch)]
        lags.extend(version - b.params_version for b in blocks)
        unroll = concat_blocks(blocks)
        self.action_stats.add(unroll.task_id, unroll.action, unroll.behaviour_logits)
        with self.timer.time('learner_h2d'):
          batch = learner_lib.shard_batch(unroll, self.mesh)
        with self.timer.time('learner_step'):
          state, metrics = self.update(self.state, batch)
          jax.block_until_ready(metrics)
        self.state = state  # with env_steps below: what a checkpoint pairs
        version += 1
        self.store.publish(self._variables(), version)
        self.env_steps += plan.env_steps_per_update
        window.append(metrics)
        if self.env_steps >= self._next_checkpoint:
          with self.timer.time('checkpoint'):
            self.save_checkpoint()
          self._next_checkpoint = self._checkpoint_after(self.env_steps)
        now = time.perf_counter()
        done = self.env_steps >= config.total_env_steps or self.stop.is_set()
        if done or now - last_log >= config.log.every_seconds:
          summary = self._summarise(window, lags, (self.env_steps - last_steps) / (now - last_log))
          on_log(summary)
          if not np.isfinite(summary['loss/total']):
            raise FloatingPointError(f'loss is {summary["loss/total"]} at env step {self.env_steps}')
          window, lags, last_log, last_steps = [], [], now, self.env_steps
    finally:
      self.close()
    return self.state

  def _summarise(self, window, lags, sps) -> Dict:
    plan = self.plan
    host = jax.device_get(window)
    out = {'env_steps': self.env_steps,
           'env_frames': self.env_steps * plan.frames_per_step,
           'learner_steps': int(self.state.step),
           'sps': float(sps),
           'policy_lag': float(np.mean(lags)) if lags else 0.0,
           'policy_lag_max': int(np.max(lags)) if lags else 0,
           'actor_env_steps': sum(a.env_steps for a in self.actors),
           'queue_size': self.unrolls.qsize()}
    for key in host[0]:
      if key.startswith('popart/'):
        continue
      out[key] = float(np.mean([m[key] for m in host]))
    last = host[-1]
    for i, name in enumerate(plan.task_names):
      j = i if self.config.popart.enabled else 0
      out[f'popart/mu/{name}'] = float(last['popart/mu'][j])
      out[f'popart/sigma/{name}'] = float(last['popart/sigma'][j])
    episodes = collections.defaultdict(list)
    while True:
      try:
        e = self.episodes.get_nowait()
      except queue.Empty:
        break
      episodes[e.task_id].append(e)
    for task_id, eps in sorted(episodes.items()):
      name = plan.task_names[task_id]
      out[f'episode_return/{name}'] = float(np.mean([e.episode_return for e in eps]))
      out[f'episode_length/{name}'] = float(np.mean([e.episode_length for e in eps]))
      out[f'episodes/{name}'] = len(eps)
      for stat in (eps[0].stats or {}):  # e.g. NetHack's in-game score, depth, turns
        out[f'{stat}/{name}'] = float(np.nanmean([e.stats[stat] for e in eps]))
      self._latest_returns[name] = out[f'episode_return/{name}']
      hns = atari.human_normalised(plan.task_games[task_id], out[f'episode_return/{name}'])
      if hns is not None:  # Atari games with reference scores
        out[f'hns/{name}'] = self._latest_hns[name] = hns
    if self._latest_returns:  # each task's latest window with episodes; a sweep's target
      out['mean_episode_return'] = float(np.mean(list(self._latest_returns.values())))
    if len(self._latest_hns) > 1:  # over each task's latest window with episodes
      for stat, value in atari.hns_summary(self._latest_hns).items():
        out[f'hns/{stat}'] = value
    actions, collapsed = self.action_stats.summary(plan.task_names, self.action_names)
    out.update(actions)
    for line in collapsed:
      logging.warning('%s', line)
    out['env/restarts'] = sum(env.restarts for env in self.envs)
    out.update(self.timer.drain())
    return out

  def close(self) -> None:
    """Stops the actors and closes the envs; safe to call twice."""
    self.stop.set()
    for actor in self.actors:
      if actor.is_alive():
        actor.join(timeout=30.0)
    for actor, env in zip(self.actors, self.envs):
      if actor.is_alive():
        # Closing an env while its actor is still inside step() can deadlock
        # (EnvPool): leave it to process exit rather than hang here.
        logging.warning('%s did not stop within 30 s; leaving its envs open', actor.name)
        continue
      env.close()
    self.envs = []
