"""Throughput of a config, stage by stage, and the GPU suite as one table
(`launch/benchmark.py` is the command line and says what each stage measures).

Each `bench_*(spec, seconds, warmup)` takes a RunSpec of a `quiet` config
(configs.validation.validate_spec), uses its own envs, actor threads and batch sizes, and measures
for `seconds` after `warmup` seconds (compilation excluded).
"""

import importlib
import os
import queue
import tempfile
import threading
import time

import jax
import numpy as np

from agents import actor as actor_lib
from agents import builder
from agents import learner as learner_lib
from agents import standin
from agents.rollout import policy_observation_spec
from agents.timing import StageTimer
from agents.trainer import Trainer
from configs.validation import validate_spec
from envs import registry
from networks.nethack import NLE_NUM_GLYPHS
from rl.types import Unroll


def bench_raw(spec, seconds, warmup):
  """The envs alone, every actor's batched env on its own thread stepped with
  random actions (warm-up at most 3 s); agent steps/s summed over the actors."""
  envs = actor_lib.make_envs(spec)
  counts = [0] * len(envs)
  stop = threading.Event()

  def loop(i, env):
    rng = np.random.default_rng(i)
    env.reset()
    while not stop.is_set():
      env.step(rng.integers(0, env.num_actions, env.num_envs))
      counts[i] += env.num_envs

  threads = [threading.Thread(target=loop, args=(i, e), daemon=True) for i, e in enumerate(envs)]
  for t in threads:
    t.start()
  time.sleep(min(warmup, 3.0))
  start, c0 = time.perf_counter(), sum(counts)
  time.sleep(seconds)
  sps = (sum(counts) - c0) / (time.perf_counter() - start)
  stop.set()
  for t in threads:
    t.join()
  for e in envs:
    e.close()
  return sps


def bench_actors(spec, seconds, warmup):
  """Actors with their policy and no learner (batches dropped): agent steps/s summed over them."""
  trainer = Trainer(spec)
  trainer.start()
  try:
    deadline = time.perf_counter() + warmup + seconds
    start, s0 = None, 0
    while time.perf_counter() < deadline:
      trainer.next_batch()  # discarded: no learner
      if start is None and time.perf_counter() > deadline - seconds:
        start, s0 = time.perf_counter(), sum(a.env_steps for a in trainer.actors)
    return (sum(a.env_steps for a in trainer.actors) - s0) / (time.perf_counter() - start)
  finally:
    trainer.close()


def _actor_spaces(plan):
  """(num_actions, observation spec) of actor 0's first env group."""
  group = plan.actor_env_groups[0][0]
  return registry.env_spaces(group.env_id, group.env_kwargs, plan.observation_keys)


def bench_loop(spec, seconds, warmup):
  """One actor thread's own cost, with a stand-in env and policy
  (agents/standin.py) of actor 0's spaces and env count (warm-up at most 2 s).

  Returns:
    (microseconds per agent step, agent steps/s).

  Raises:
    Exception: the actor thread's own error.
  """
  plan = spec.plan
  num_actions, obs_spec = _actor_spaces(plan)
  n = spec.actors.envs_per_actor
  env = standin.StandInEnv(n, num_actions, obs_spec, num_tasks=plan.num_tasks)
  store = actor_lib.ParamsStore()
  store.publish({}, 0)
  unrolls, episodes = queue.Queue(maxsize=spec.actors.queue_size), queue.SimpleQueue()
  stop = threading.Event()
  actor = actor_lib.Actor(0, env, standin.standin_act_fn(n, num_actions), (), store, unrolls,
                          episodes, StageTimer(), stop, spec.run.unroll_length,
                          plan.actor_device, seed=0)

  def drain():
    while not stop.is_set():
      try:
        unrolls.get(timeout=0.1)
      except queue.Empty:
        continue
      while True:
        try:
          episodes.get_nowait()
        except queue.Empty:
          break

  drainer = threading.Thread(target=drain, daemon=True)
  drainer.start()
  actor.start()
  try:
    time.sleep(min(warmup, 2.0))
    start, s0 = time.perf_counter(), actor.env_steps
    time.sleep(seconds)
    sps = (actor.env_steps - s0) / (time.perf_counter() - start)
  finally:
    stop.set()
    actor.join()
    drainer.join()
  if actor.error is not None:
    raise actor.error
  return 1e6 / sps, sps


def synthetic_batch(spec, num_actions: int, obs_spec, seed: int = 0) -> Unroll:
  """This process's random share of a learner batch, shaped as the actors send it.

  Frames cover 0..255, glyphs 0..NLE_NUM_GLYPHS - 1, other integer observations 0..9, floats are
  normal; column i is task i % num_tasks; about 1% of steps start an episode.

  Args:
    obs_spec: the env's observation spec (key -> (shape, dtype)); the policy's
      extra inputs (agents.rollout.policy_observation_spec) are added.

  Returns:
    An Unroll of host arrays [T + 1, B / processes, ...] with core_state ().
  """
  plan = spec.plan
  t1, b = spec.run.unroll_length + 1, spec.run.batch_size // jax.process_count()
  rng = np.random.default_rng(seed)
  obs = {}
  for key, (shape, dtype) in policy_observation_spec(obs_spec).items():
    shape, dtype = (t1, b) + tuple(shape), np.dtype(dtype)
    if key == 'task_id':
      obs[key] = np.broadcast_to(np.arange(b) % plan.num_tasks, (t1, b)).astype(dtype)
    elif key == 'prev_action':
      obs[key] = rng.integers(0, num_actions, shape).astype(dtype)
    elif key == 'glyphs':
      obs[key] = rng.integers(0, NLE_NUM_GLYPHS, shape).astype(dtype)
    elif np.issubdtype(dtype, np.integer):
      high = 256 if dtype == np.uint8 else 10
      obs[key] = rng.integers(0, high, shape).astype(dtype)
    else:
      obs[key] = rng.normal(size=shape).astype(dtype)
  return Unroll(
      obs=obs, first=rng.random((t1, b)) < 0.01,
      action=rng.integers(0, num_actions, (t1, b)).astype(np.int32),
      behaviour_logits=rng.normal(size=(t1, b, num_actions)).astype(np.float32),
      reward=rng.normal(size=(t1, b)).astype(np.float32),
      discount=np.full((t1, b), spec.run.discount, np.float32),
      task_id=obs['task_id'].copy(), core_state=())


def bench_learner(spec, seconds, warmup):
  """The learner's compiled update on one synthetic batch, repeated (at least 3 times).

  Returns:
    (updates/s, the compiled update's arguments + outputs + temporaries in MiB; None: not reported).
  """
  num_actions, obs_spec = _actor_spaces(spec.plan)
  agent = builder.build_agent(spec, num_actions, obs_spec)
  batch = synthetic_batch(spec, num_actions, obs_spec)
  batch = batch._replace(core_state=jax.tree.map(
      np.asarray, agent.network.initial_state(batch.action.shape[1])))
  batch = learner_lib.shard_batch(batch, agent.mesh)
  compiled = agent.update.lower(agent.state, batch).compile()
  memory = None
  analysis = compiled.memory_analysis()
  if analysis is not None:
    memory = (analysis.argument_size_in_bytes + analysis.output_size_in_bytes
              + analysis.temp_size_in_bytes) / 2**20
  del warmup   # compiled above; one update warms the allocator
  state, metrics = compiled(agent.state, batch)
  jax.block_until_ready(metrics)
  start, updates = time.perf_counter(), 0
  while True:
    state, metrics = compiled(state, batch)
    jax.block_until_ready(metrics)
    updates += 1
    elapsed = time.perf_counter() - start
    if elapsed >= seconds and updates >= 3:
      return updates / elapsed, memory


def bench_train(spec, seconds, warmup):
  """The whole training loop, actors and learner, as a run trains, until warmup + seconds have
  passed between log rows (a `quiet` config's spec logs every second and never reaches its total).

  Returns:
    (agent steps/s after the warm-up, the last row's 'timing/...' entries).
  """
  trainer = Trainer(spec)
  marks = []
  timings = {}

  def on_log(m):
    marks.append((time.perf_counter(), m['env_steps']))
    timings.update({k: v for k, v in m.items() if k.startswith('timing/')})
    if marks[-1][0] - marks[0][0] >= warmup + seconds:
      trainer.stop_requested.set()

  trainer.run(on_log)
  t0 = next(m for m in marks if m[0] - marks[0][0] >= warmup)
  t1 = marks[-1]
  return (t1[1] - t0[1]) / (t1[0] - t0[0]), timings


# --suite=gpu: (name, config module, variant).
GPU_SUITE = (
    ('Pong, Nature CNN', 'atari_single', 'game=Pong'),
    ('Pong, IMPALA ResNet', 'atari_single', 'game=Pong,net=resnet'),
    ('six games, PopArt', 'atari_popart', ''),
    ('main job (NetHack)', 'nethack_popart', ''),
)
SUITE_DTYPES = ('float32', 'bfloat16')


def quiet(config):
  """Makes config benchmark-ready in place and returns it (its total is never
  reached: the learning rate's schedule does not change the speed)."""
  with config.unlocked():
    config.wandb.mode = 'disabled'
    config.log.progress = False
    config.workdir = tempfile.mkdtemp(prefix='benchmark-')  # no checkpoints left behind
    config.total_env_steps = 10**12
    config.log.every_seconds = 1.0
  return config


def suite_config(module: str, variant: str, dtype: str, small: bool):
  """A suite entry's config (configs/<module>.py with `variant`, plus 'smoke'
  when `small`) at network.dtype `dtype`, made `quiet`."""
  variant = ','.join(v for v in (variant, 'smoke' if small else '') if v)
  config = importlib.import_module(f'configs.{module}').get_config(variant or None)
  with config.unlocked():
    config.network.dtype = dtype
  return quiet(config)


def device_line() -> str:
  d = jax.devices()[0]
  return (f'{jax.device_count()} x {d.platform} device ({d.device_kind}), '
          f'{os.cpu_count()} CPU cores, JAX {jax.__version__}')


def run_suite(small: bool, seconds: float, warmup: float, stages=('learner', 'train'),
              out=print, entries=None):
  """Measures GPU_SUITE at each of SUITE_DTYPES, printing a line per entry
  and then `suite_table` to `out`.

  Args:
    stages: of 'learner' (bench_learner) and 'train' (bench_train).
    entries: only these (name, dtype) pairs; None: all.

  Returns:
    The rows: dicts with 'config', 'dtype', 'batch' ('B x T') and per stage
    'learner_ups', 'learner_sps', 'learner_mib' or 'train_sps'.
  """
  rows = []
  for name, module, variant in GPU_SUITE:
    for dtype in SUITE_DTYPES:
      if entries is not None and (name, dtype) not in entries:
        continue
      spec = validate_spec(suite_config(module, variant, dtype, small))
      steps = spec.run.batch_size * spec.run.unroll_length
      row = {'config': name, 'dtype': dtype,
             'batch': f'{spec.run.batch_size} x {spec.run.unroll_length}'}
      if 'learner' in stages:
        ups, memory = bench_learner(spec, seconds, warmup)
        row.update(learner_ups=ups, learner_sps=ups * steps, learner_mib=memory)
      if 'train' in stages:
        row['train_sps'] = bench_train(spec, seconds, warmup)[0]
      rows.append(row)
      out(f'{name}, {dtype}: ' + ', '.join(f'{k} {v:,.1f}' for k, v in row.items()
                                            if isinstance(v, float)))
  out(suite_table(rows))
  return rows


def suite_table(rows) -> str:
  """`run_suite`'s rows as a markdown table under device_line(); '-' for values not measured."""
  fmt = lambda v, spec: '-' if v is None else format(v, spec)
  lines = [device_line(), '',
           '| config | dtype | batch (B x T) | learner updates/s | learner agent steps/s '
           '| learner memory (MiB) | agent steps/s (actors + learner) |',
           '| --- | --- | --- | --- | --- | --- | --- |']
  for r in rows:
    lines.append(f'| {r["config"]} | {r["dtype"]} | {r["batch"]} | {fmt(r.get("learner_ups"), ",.2f")} '
                 f'| {fmt(r.get("learner_sps"), ",.0f")} | {fmt(r.get("learner_mib"), ",.0f")} '
                 f'| {fmt(r.get("train_sps"), ",.0f")} |')
  return '\n'.join(lines)
