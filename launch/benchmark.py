"""Throughput of a config: raw env stepping, actors with inference, full training.

  python launch/benchmark.py --config=configs/atari_single.py:game=Pong
  python launch/benchmark.py --config=configs/nethack_popart.py --stages=raw,train --seconds=60

Each stage uses the config's own envs, actor threads and batch sizes, and
reports agent steps per second after a warm-up (compilation excluded):
  raw     every actor's envs stepped by its own thread with random actions
  actors  the real actor threads with policy inference, no learner
  train   the full Sebulba loop (actors + learner)
Also prints the peak resident memory of this process and of its children
(NLE workers).
"""

import json
import os
import resource
import tempfile
import threading
import time

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags
import numpy as np

from agents.trainer import Trainer
from configs.validation import validate
from envs import registry

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Experiment config file[:variant]')
_STAGES = flags.DEFINE_list('stages', ['raw', 'actors', 'train'], 'Stages to measure.')
_SECONDS = flags.DEFINE_float('seconds', 30.0, 'Measured seconds per stage.')
_WARMUP = flags.DEFINE_float('warmup', 10.0, 'Seconds before measuring (compilation, fill).')
_OUTPUT = flags.DEFINE_string('output', '', 'Optional JSON file for the results.')


def bench_raw(config, plan, seconds, warmup):
  a = config.actors
  envs = [registry.make_actor_envs(groups, seed=i, envpool_threads=a.envpool_threads,
                                   nle_workers=a.nle_workers,
                                   observation_keys=plan.observation_keys)
          for i, groups in enumerate(plan.actor_env_groups)]
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


def bench_actors(config, plan, seconds, warmup):
  trainer = Trainer(config, plan)
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


def bench_train(config, plan, seconds, warmup):
  with config.unlocked():
    config.total_env_steps = 10**12
    config.log.every_seconds = 1.0
  trainer = Trainer(config, plan)
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


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  config = _CONFIG.value
  with config.unlocked():
    config.wandb.mode = 'disabled'
    config.log.progress = False
    config.workdir = tempfile.mkdtemp(prefix='benchmark-')  # no checkpoints left behind
  plan = validate(config)
  results = {'config': config.config_name, 'num_actors': config.actors.num_actors,
             'envs_per_actor': config.actors.envs_per_actor, 'network': config.network.name,
             'batch_size': config.batch_size, 'unroll_length': config.unroll_length,
             'cpu_count': os.cpu_count()}
  for stage in _STAGES.value:
    fn = {'raw': bench_raw, 'actors': bench_actors, 'train': bench_train}[stage]
    out = fn(config, plan, _SECONDS.value, _WARMUP.value)
    if stage == 'train':
      out, results['train_timings'] = out
    results[f'{stage}_sps'] = round(out, 1)
    print(f'{stage:>7}: {out:10,.0f} agent steps/s', flush=True)
  results['peak_rss_mib'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  results['peak_rss_children_mib'] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
  print(json.dumps(results, indent=1))
  if _OUTPUT.value:
    with open(_OUTPUT.value, 'w') as f:
      json.dump(results, f, indent=1)


if __name__ == '__main__':
  flags.mark_flag_as_required('config')
  app.run(main)
