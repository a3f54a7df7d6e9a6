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
from typing import Callable, Dict, List, Optional

from absl import logging
import jax
import numpy as np

from agents import learner as learner_lib
from agents.action_stats import ActionStats
from agents.checkpoint import Checkpointer
from agents import losses
from agents import multihost
from agents.actor import (Actor, ParamsStore, UnrollBlock, host_dtype, make_act_fn,
                          observation_spec_with_prev)
from agents.timing import StageTimer
from agents.types import Unroll
from envs import atari
from envs import registry
from networks import agent as agent_net


class ActorFailed(RuntimeError):
  pass


class NonFiniteError(FloatingPointError):
  """A learner quantity became NaN or inf; the last good state is saved."""


# Checked after every update, in this order: the first non-finite one names
# the failure. 'nonfinite/state' counts the non-finite values of the updated
# params and optimiser state (learner._finish): it must be 0.
FINITE_CHECKS = ('loss/total', 'grad_norm', 'popart/mu', 'popart/sigma', 'nonfinite/state')


def first_non_finite(metrics: Dict) -> Optional[str]:
  """The first of FINITE_CHECKS whose value (host arrays) is not finite (for
  'nonfinite/state': not 0), or None."""
  for key in FINITE_CHECKS:
    if key not in metrics:
      continue
    value = metrics[key]
    if not np.all(np.isfinite(value)) or (key == 'nonfinite/state' and np.any(value != 0)):
      return key
  return None


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

  def __init__(self, config, plan, stop_requested: Optional[threading.Event] = None):
    self.config, self.plan = config, plan
    self.timer = StageTimer()
    self.stop = threading.Event()            # stops the actors (and, in one process, the loop)
    # A stop asked for (a signal, a benchmark's end): the loop ends after the
    # update in progress; with several processes when any process asks, at
    # the same update on all of them.
    self.stop_requested = stop_requested or threading.Event()
    self.interrupted = False
    a = config.actors
    first_actor = jax.process_index() * a.num_actors  # actor ids are global
    self.checkpointer = Checkpointer(config.workdir, config.keep_intermediate,
                                     primary=multihost.is_primary())
    # A resumed run continues from its latest checkpoint; its envs and actors
    # get fresh seeds (offset by the env step) rather than replaying the start.
    self.resumed_from = self._agreed_latest_step()
    offset = self.resumed_from or 0
    self.envs = [registry.make_actor_envs(
        groups, seed=(config.seed * 100_003 + 1_009 * (first_actor + i) + offset) % 2**31,
        envpool_threads=a.envpool_threads,
        nle_workers=a.nle_workers, observation_keys=plan.observation_keys,
        nle_savedir=(f'{config.workdir}/nle' if a.nle_ttyrecs else None))
        for i, groups in enumerate(plan.actor_env_groups)]
    env = self.envs[0]
    self.network = agent_net.make_network(config.network, env.num_actions, plan.num_values)
    example = {k: np.zeros(s, host_dtype(d))
               for k, (s, d) in observation_spec_with_prev(env.observation_spec).items()}
    variables = agent_net.init_variables(self.network, jax.random.key(config.seed), example,
                                         init=config.network.init)

    optimizer, self.schedule = learner_lib.optimizer_from_config(config, plan.total_learner_steps)
    self.mesh = learner_lib.make_mesh(plan.learner_devices)
    self.state = learner_lib.init_state(variables, optimizer, self.mesh)
    self.rng = jax.random.key(config.seed)
    self.env_steps = 0
    if self.resumed_from is not None:
      restored = self.checkpointer.restore(self.state, self.resumed_from)
      self.state, self.env_steps, self.rng = (
          restored['state'], restored['env_steps'], restored['rng'])
    self.start_env_steps = self.env_steps  # where this process began: a stop says what is new
    self._next_checkpoint = self._checkpoint_after(self.env_steps)
    loss_cfg = losses.config_from(config)
    self.update = learner_lib.build_update(
        agent_net.apply_fn(self.network, with_health=True), optimizer, self.schedule, loss_cfg,
        agent_net.VALUE_HEAD, self.mesh, config.optimizer.max_grad_norm, seed=config.seed)

    self.store = ParamsStore()
    self.unrolls = queue.Queue(maxsize=a.queue_size)
    self.episodes = queue.SimpleQueue()
    act = make_act_fn(self.network)
    self.actors = [
        Actor(first_actor + i, e, act, self.network.initial_state(e.num_envs), self.store,
              self.unrolls, self.episodes, self.timer, self.stop, config.unroll_length,
              plan.actor_device, seed=self._actor_seed(first_actor + i),
              wait_for_learner=a.wait_for_learner)
        for i, e in enumerate(self.envs)]
    self._latest_hns: Dict[str, float] = {}
    self._latest_returns: Dict[str, float] = {}
    group = plan.actor_env_groups[0][0]
    self.action_names = registry.action_names(group.env_id, group.env_kwargs, env.num_actions)
    self.action_stats = ActionStats(plan.num_tasks, env.num_actions)

  def _agreed_latest_step(self) -> Optional[int]:
    """The latest checkpoint's env step, the same on every process (a shared
    filesystem's caches may lag on one host: restoring is collective)."""
    steps = multihost.allgather_json(self.checkpointer.latest_step())
    if len(set(steps)) > 1:
      raise RuntimeError(f'processes see different latest checkpoints in '
                         f'{self.checkpointer.directory}: {steps} (by process); is the workdir '
                         'one shared folder?')
    return steps[0]

  def _actor_seed(self, i: int) -> int:
    key = jax.random.fold_in(jax.random.fold_in(self.rng, self.env_steps), i)
    return int(jax.random.randint(key, (), 0, 2**31 - 1))

  def _checkpoint_after(self, env_steps: int) -> float:
    every = self.config.checkpoint_every_steps
    return (env_steps // every + 1) * every if every else float('inf')

  def save_checkpoint(self) -> bool:
    """Saves the learner state at the current env step (once per step);
    True when a checkpoint was written now. With several processes every
    process calls it (orbax writes once)."""
    return self.checkpointer.save(self.env_steps, self.state, self.rng)

  def _variables(self):
    """This process's copy of the variables, for its actors."""
    return learner_lib.local_copy({'params': self.state.params, 'popart': self.state.popart})

  def check_replicas(self) -> str:
    """The params' digest, the same on every learner device of every process;
    raises RuntimeError naming the processes whose copies differ."""
    digest = multihost.replica_digest(self.state.params)
    digests = multihost.allgather_json(digest)
    if len(set(digests)) != 1 or digest == 'differ':
      raise RuntimeError('learner params differ across devices or processes (digest per '
                         f'process: {digests}) at learner step {int(self.state.step)}')
    return digest

  def _check_actors(self) -> None:
    for actor in self.actors:
      if actor.error is not None:
        raise ActorFailed(f'{actor.name} failed: {actor.error!r}') from actor.error
      if not actor.is_alive():
        raise ActorFailed(f'{actor.name} stopped unexpectedly')

  def _next_block(self) -> UnrollBlock:
    # Checked at every block, not only when the queue is empty: with several
    # actors the others would keep the queue full and hide a dead one.
    self._check_actors()
    with self.timer.time('learner_queue_get'):
      while True:
        try:
          return self.unrolls.get(timeout=1.0)
        except queue.Empty:
          self._check_actors()

  def run(self, on_log: Callable[[Dict], None]):
    """Trains until total_env_steps; returns the final learner state.

    `on_log` gets the metrics of every log step, on process 0 only; every
    process's episodes and actions are in them. Raises NonFiniteError after
    saving the last good state when a loss, gradient or PopArt statistic
    stops being finite.
    """
    config, plan = self.config, self.plan
    version = int(self.state.step)
    if self._agree(False, self.stop_requested.is_set())[1]:  # asked during start-up: no update
      self.interrupted = True
      self.close()
      return self.state
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
        if version + 1 == config.debug.nan_reward_at_update:  # test hook
          unroll = unroll._replace(reward=np.full_like(unroll.reward, np.nan))
        self.action_stats.add(unroll.task_id, unroll.action, unroll.behaviour_logits)
        with self.timer.time('learner_h2d'):
          batch = learner_lib.shard_batch(unroll, self.mesh)
        with self.timer.time('learner_step'):
          state, metrics = self.update(self.state, batch)
          checked = jax.device_get({k: metrics[k] for k in FINITE_CHECKS})
        bad = first_non_finite(checked)
        if bad is not None:
          self._stop_non_finite(bad, checked[bad])
        self.state = state  # with env_steps below: what a checkpoint pairs
        version += 1
        self.store.publish(self._variables(), version)
        self.env_steps += plan.env_steps_per_update
        window.append(metrics)
        if self.env_steps >= self._next_checkpoint:
          with self.timer.time('checkpoint'):
            self.save_checkpoint()
            if multihost.is_multiprocess():
              self.check_replicas()  # what the checkpoint holds is what every process holds
          self._next_checkpoint = self._checkpoint_after(self.env_steps)
        now = time.perf_counter()
        log_due, stop = self._agree(now - last_log >= config.log.every_seconds,
                                    self.stop_requested.is_set())
        done = self.env_steps >= config.total_env_steps or stop
        if done or log_due:
          reports = multihost.allgather_json(self._window_report(lags))
          if multihost.is_primary():
            sps = (self.env_steps - last_steps) / (now - last_log)
            on_log(self._summarise(window, reports, sps))
          window, lags, last_log, last_steps = [], [], now, self.env_steps
        if stop:
          self.interrupted = True
          break
    finally:
      self.close()
    return self.state

  def _agree(self, log_due: bool, stop: bool):
    """(log now, stop now), the same on every process: process 0's clock
    decides when to log; any process asking to stop stops them all."""
    if not multihost.is_multiprocess():
      return log_due, stop
    with self.timer.time('process_sync'):
      votes = multihost.allgather_ints([log_due, stop])
    return bool(votes[0, 0]), bool(votes[:, 1].any())

  def _stop_non_finite(self, name: str, value) -> None:
    """Saves the state before the update that went non-finite, then raises."""
    self.close()
    self.save_checkpoint()
    value = np.asarray(value)
    shown = value.item() if value.size == 1 else value.tolist()
    if name == 'nonfinite/state':
      name, shown = 'parameters or optimiser state', f'{int(shown)} values'
    raise NonFiniteError(
        f'non-finite {name} ({shown}) at learner step {int(self.state.step) + 1} '
        f'(env step {self.env_steps + self.plan.env_steps_per_update:,}); the last good state '
        f'is saved at env step {self.env_steps:,} in {self.checkpointer.directory}')

  def _window_report(self, lags: List[int]) -> Dict:
    """This process's side of a log window, JSON-able: its episodes, actions,
    policy lags and actor counts. Drains the episode queue and resets the
    action window."""
    episodes = []
    while True:
      try:
        e = self.episodes.get_nowait()
      except queue.Empty:
        break
      episodes.append([e.task_id, e.episode_return, e.episode_length, e.stats])
    return {'episodes': episodes, 'actions': self.action_stats.drain(),
            'lags': [int(x) for x in lags],
            'actor_env_steps': int(sum(a.env_steps for a in self.actors)),
            'queue_size': self.unrolls.qsize(),
            'restarts': int(sum(env.restarts for env in self.envs))}

  def _summarise(self, window, reports: List[Dict], sps) -> Dict:
    """The log step's metrics from the update metrics of the window and every
    process's window report (process order)."""
    plan = self.plan
    host = jax.device_get(window)
    lags = [x for r in reports for x in r['lags']]
    out = {'env_steps': self.env_steps,
           'env_frames': self.env_steps * plan.frames_per_step,
           'learner_steps': int(self.state.step),
           'sps': float(sps),
           'policy_lag': float(np.mean(lags)) if lags else 0.0,
           'policy_lag_max': int(np.max(lags)) if lags else 0,
           'actor_env_steps': sum(r['actor_env_steps'] for r in reports),
           'queue_size': sum(r['queue_size'] for r in reports)}
    if len(reports) > 1:  # what each process contributes: a slow host shows here
      for p, r in enumerate(reports):
        out[f'process/{p}/actor_env_steps'] = r['actor_env_steps']
        out[f'process/{p}/episodes'] = len(r['episodes'])
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
    for r in reports:
      for task_id, episode_return, episode_length, stats in r['episodes']:
        episodes[task_id].append((episode_return, episode_length, stats))
    for task_id, eps in sorted(episodes.items()):
      name = plan.task_names[task_id]
      out[f'episode_return/{name}'] = float(np.mean([e[0] for e in eps]))
      out[f'episode_length/{name}'] = float(np.mean([e[1] for e in eps]))
      out[f'episodes/{name}'] = len(eps)
      for stat in (eps[0][2] or {}):  # e.g. NetHack's in-game score, depth, turns
        out[f'{stat}/{name}'] = float(np.nanmean([e[2][stat] for e in eps]))
      self._latest_returns[name] = out[f'episode_return/{name}']
      hns = atari.human_normalised(plan.task_games[task_id], out[f'episode_return/{name}'])
      if hns is not None:  # Atari games with reference scores
        out[f'hns/{name}'] = self._latest_hns[name] = hns
    if self._latest_returns:  # each task's latest window with episodes; a sweep's target
      out['mean_episode_return'] = float(np.mean(list(self._latest_returns.values())))
    if len(self._latest_hns) > 1:  # over each task's latest window with episodes
      for stat, value in atari.hns_summary(self._latest_hns).items():
        out[f'hns/{stat}'] = value
    actions, collapsed = self.action_stats.summary(
        plan.task_names, self.action_names, [r['actions'] for r in reports])
    out.update(actions)
    for line in collapsed:
      logging.warning('%s', line)
    out['env/restarts'] = sum(r['restarts'] for r in reports)
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
