"""The Sebulba training loop (Hessel et al. 2021, arXiv 2104.06272): actors feed a sharded learner.

`Trainer.run()` loops the public steps `start`, `next_batch`, `step` and `publish` (which tools also
drive by hand) until total_env_steps, saving checkpoints and handing each log step's metrics to a
callback. Side effects live here; the math is in `rl/` and `agents/learner.py`.
"""

import queue
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

from absl import logging
import jax
import numpy as np

from agents import builder
from agents import learner as learner_lib
from agents import actor as actor_lib
from agents.actor import ParamsStore, UnrollBlock
from agents.checkpoint import Checkpointer
from agents.update_checks import (FINITE_CHECKS, NonFiniteError, check_task_ids, concat_blocks,
                                  first_non_finite)
from agents.summaries import Summariser
from agents.timing import StageTimer
from envs import registry
from infra import multihost
from networks.agent import VALUE_HEAD
from rl import optimizers
from rl.types import Unroll


class ActorFailed(RuntimeError):
  """An actor thread failed or stopped; the message names it."""
  pass


class Trainer:
  """Envs, agent, actors (not started) and checkpoints of one process of a run.

  Restores the workdir's latest checkpoint: a resumed run keeps the config's learner hyperparameters
  (differences in `changed_hyperparameters`) and gets fresh env and actor seeds.

  Args:
    stop_requested: set (by a signal handler) to stop after the current update; None: a new Event.

  Raises:
    RuntimeError: processes see different latest checkpoints.
    CheckpointError: the checkpoint cannot be restored.
  """

  def __init__(self, spec, stop_requested: Optional[threading.Event] = None):
    self.spec, self.plan = spec, spec.plan
    plan = spec.plan
    self.timer = StageTimer()
    self.stop = threading.Event()            # stops the actors (and, in one process, the loop)
    self.stop_requested = stop_requested or threading.Event()
    self.interrupted = False
    first_actor = jax.process_index() * plan.num_actors  # actor ids are global
    self.checkpointer = Checkpointer(spec.run.workdir, spec.run.keep_intermediate,
                                     primary=multihost.is_primary())
    self.resumed_from = self._agreed_latest_step()
    self.envs = actor_lib.make_envs(spec, first_actor, self.resumed_from or 0)
    env = self.envs[0]
    agent = builder.build_agent(spec, env.num_actions, env.observation_spec)
    self.network, self.mesh, self.schedule = agent.network, agent.mesh, agent.schedule
    self.update = agent.update   # (state, batch) -> (state, metrics); does not change self
    self.task_gradients = agent.task_gradients   # None, or the per-task gradient report
    self.state = agent.state
    self.rng = jax.random.key(spec.run.seed)
    self.env_steps = 0
    # {name: (checkpoint's, config's)} where they differ; the config's are used.
    self.changed_hyperparameters: Dict[str, Tuple[float, float]] = {}
    if self.resumed_from is not None:
      restored = self.checkpointer.restore(self.state, self.resumed_from)
      self.state, self.env_steps, self.rng = (
          restored['state'], restored['env_steps'], restored['rng'])
      self._use_config_hyperparameters(agent.state)
    self.start_env_steps = self.env_steps  # where this process began: a stop says what is new
    self.version = int(self.state.step)    # of the params the actors act with
    self._next_checkpoint = self._checkpoint_after(self.env_steps)

    self.store = ParamsStore()
    self.unrolls = queue.Queue(maxsize=spec.actors.queue_size)
    self.episodes = queue.SimpleQueue()
    self.actors = actor_lib.make_actors(
        spec, self.network, self.envs, self.store, self.unrolls, self.episodes,
        self.timer, self.stop, self.rng, self.env_steps, first_actor)
    group = plan.actor_env_groups[0][0]
    self.summariser = Summariser(
        plan, spec.popart.enabled,
        registry.action_names(group.env_id, group.env_kwargs, env.num_actions), env.num_actions)
    self._started = False

  def _use_config_hyperparameters(self, fresh) -> None:
    """Puts the config's learner hyperparameters (`fresh`'s) into the restored state."""
    saved = optimizers.hyperparameters(self.state.opt_state)
    wanted = optimizers.hyperparameters(fresh.opt_state)
    value_of = lambda x: float(np.asarray(learner_lib.local_copy(x)))
    for key, value in wanted.items():
      if key in saved and not np.isclose(value_of(saved[key]), value_of(value), rtol=1e-6, atol=0):
        self.changed_hyperparameters[key] = (value_of(saved[key]), value_of(value))
    self.state = self.state._replace(
        opt_state=self.state.opt_state._replace(hyperparams=dict(wanted)))

  def start(self) -> None:
    """Publishes the current params and starts the actors (once)."""
    if self._started:
      return
    self._started = True
    self.publish()
    for actor in self.actors:
      actor.start()

  def publish(self) -> None:
    """Hands this process's copy of the current variables to its actors."""
    self.store.publish(
        learner_lib.local_copy({'params': self.state.params, 'popart': self.state.popart}),
        self.version)

  def load(self, state, env_steps: int) -> None:
    """Replaces the learner state (placed as this trainer's) and its env step, before start."""
    self.state, self.env_steps, self.version = state, env_steps, int(state.step)

  def next_batch(self) -> Tuple[Unroll, List[int]]:
    """The next learner batch from plan.blocks_per_batch actor blocks, in actor order (the order
    decides which unrolls share a minibatch; arrival order is a race): (an Unroll of host arrays,
    each block's policy lag in learner updates). ActorFailed when an actor failed or stopped;
    update_checks.TaskIdError for task ids outside the run's."""
    blocks = [self._next_block() for _ in range(self.plan.blocks_per_batch)]
    blocks.sort(key=lambda b: (b.actor_id, b.params_version))   # stable: arrival order within
    unroll = concat_blocks(blocks)
    check_task_ids(unroll, self.plan.num_tasks)
    return unroll, [self.version - b.params_version for b in blocks]

  def step(self, unroll: Unroll) -> Dict:
    """One learner update on this process's batch: checked for non-finite values, then committed,
    published and counted; returns its metrics (device arrays). NonFiniteError when a FINITE_CHECKS
    value is not finite, after saving the state from before the update."""
    with self.timer.time('learner_h2d'):
      batch = learner_lib.shard_batch(unroll, self.mesh)
    with self.timer.time('learner_step'):
      state, metrics = self.update(self.state, batch)
      checked = jax.device_get({k: metrics[k] for k in FINITE_CHECKS})
    bad = first_non_finite(checked)
    if bad is not None:
      self._stop_non_finite(bad, checked[bad])
    self.state = state  # with env_steps below: what a checkpoint pairs
    self.version += 1
    self.publish()
    self.env_steps += self.plan.env_steps_per_update
    return metrics

  def run(self, on_log: Callable[[Dict], None], until: Optional[int] = None):
    """Trains until total_env_steps (or `until`); returns the final learner state.

    Checkpoints every run.checkpoint_every_steps (then checks the replicas agree), and at step 0
    with keep_intermediate. A stop ends the loop after the update in progress, at the same update on
    every process, and sets `interrupted`.

    Args:
      on_log: gets each log step's metrics, on process 0 only.
      until: env steps at which this call ends instead, leaving the actors running for a later call
        (PBT members train interval by interval); the run's end, a stop or an error closes it.

    Raises:
      NonFiniteError: a loss, gradient or PopArt statistic stopped being finite.
      ActorFailed: an actor failed or stopped.
    """
    run, log_settings = self.spec.run, self.spec.log
    target = run.total_env_steps if until is None else min(until, run.total_env_steps)
    if self._agree(False, self.stop_requested.is_set())[1]:  # asked during start-up: no update
      self.interrupted = True
      self.close()
      return self.state
    if run.keep_intermediate and self.env_steps == 0:
      self.save_checkpoint()  # the initialisation, for analyses of training
    self.start()
    window: List[Dict] = []
    lags: List[int] = []
    last_log = last_report = time.perf_counter()
    last_steps = self.env_steps
    report_every = log_settings.task_gradients_seconds
    try:
      while self.env_steps < target and not self.stop.is_set():
        unroll, batch_lags = self.next_batch()
        lags.extend(batch_lags)
        self.summariser.add_batch(unroll)
        report = {}
        if self.task_gradients is not None and time.perf_counter() - last_report >= report_every:
          # Waited for: its time is its own, not the next update's.
          with self.timer.time('task_gradients'):
            report = jax.block_until_ready(self.task_gradient_report(unroll))
          last_report = time.perf_counter()
        window.append({**self.step(unroll), **report})
        if self.env_steps >= self._next_checkpoint:
          with self.timer.time('checkpoint'):
            self.save_checkpoint()
            if multihost.is_multiprocess():
              self.check_replicas()  # what the checkpoint holds is what every process holds
          self._next_checkpoint = self._checkpoint_after(self.env_steps)
        now = time.perf_counter()
        log_due, stop = self._agree(now - last_log >= log_settings.every_seconds,
                                    self.stop_requested.is_set())
        done = self.env_steps >= target or stop
        if done or log_due:
          reports = multihost.allgather_json(self._window_report(lags))
          if multihost.is_primary():
            sps = (self.env_steps - last_steps) / (now - last_log)
            metrics = self.summariser.summarise(window, reports, self.env_steps,
                                                int(self.state.step), sps)
            metrics.update(self.timer.drain())
            on_log(metrics)
          window, lags, last_log, last_steps = [], [], now, self.env_steps
        if stop:
          self.interrupted = True
          break
    except BaseException:
      self.close()
      raise
    if until is None or self.interrupted or self.stop.is_set() or (
        self.env_steps >= run.total_env_steps):
      self.close()
    return self.state

  def task_gradient_report(self, unroll: Unroll, per_task: int = 2) -> Dict:
    """Each task's policy and value gradient norms at this process's params, {'task/grad_*': [K]},
    on `per_task` unrolls of each task drawn from `unroll` (a column's task is its first step's),
    seeded by the learner step."""
    tasks = np.asarray(unroll.task_id)[0]
    rng = np.random.default_rng(int(self.state.step))
    columns = np.concatenate([
        rng.permutation(np.flatnonzero(tasks == t))[:per_task] for t in np.unique(tasks)])
    sample = jax.tree.map(lambda x: x[:, columns], unroll._replace(core_state=None))
    sample = sample._replace(core_state=jax.tree.map(lambda x: x[columns], unroll.core_state))
    local = learner_lib.local_copy({'params': self.state.params, 'popart': self.state.popart})
    return self.task_gradients(local['params'], local['popart'][VALUE_HEAD], sample)

  # Checkpoints and agreement between processes.

  def _agreed_latest_step(self) -> Optional[int]:
    """The latest checkpoint's env step, the same on every process (a shared
    filesystem's caches may lag on one host, and restoring is collective)."""
    steps = multihost.allgather_json(self.checkpointer.latest_step())
    if len(set(steps)) > 1:
      raise RuntimeError(f'processes see different latest checkpoints in '
                         f'{self.checkpointer.directory}: {steps} (by process); is the workdir '
                         'one shared folder?')
    return steps[0]

  def _checkpoint_after(self, env_steps: int) -> float:
    every = self.spec.run.checkpoint_every_steps
    return (env_steps // every + 1) * every if every else float('inf')

  def save_checkpoint(self) -> bool:
    """Saves the learner state at the current env step; every process calls it."""
    return self.checkpointer.save(self.env_steps, self.state, self.rng)

  def check_replicas(self) -> str:
    """The params' digest, after checking every device of every process holds the
    same params (a collective); RuntimeError listing the digests if not."""
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
    # Checked per block, not only on an empty queue: live actors keep it full and hide a dead one.
    self._check_actors()
    with self.timer.time('learner_queue_get'):
      while True:
        try:
          return self.unrolls.get(timeout=1.0)
        except queue.Empty:
          self._check_actors()

  def _agree(self, log_due: bool, stop: bool):
    """(log now, stop now), the same on every process: process 0's clock decides
    when to log; any process asking to stop stops them all."""
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
    """This process's side of a log window: drains the episode queue."""
    episodes = []
    while True:
      try:
        episodes.append(self.episodes.get_nowait())
      except queue.Empty:
        break
    return self.summariser.report(
        episodes, lags, actor_env_steps=sum(a.env_steps for a in self.actors),
        queue_size=self.unrolls.qsize(), restarts=sum(env.restarts for env in self.envs))

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
