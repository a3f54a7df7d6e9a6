"""launch/benchmark.py: the learner stage on a synthetic batch, and the GPU
suite at CI size on this CPU (every config, both dtypes, one table)."""

import numpy as np

from configs import nethack_popart
from configs.validation import validate
from envs import registry
from launch import benchmark


def test_synthetic_batch_is_shaped_as_the_actors_send_it():
  config = nethack_popart.get_config('smoke')
  plan = validate(config)
  group = plan.actor_env_groups[0][0]
  num_actions, obs_spec = registry.env_spaces(group.env_id, group.env_kwargs,
                                              plan.observation_keys)
  batch = benchmark.synthetic_batch(config, plan, num_actions, obs_spec)
  t1, b = config.unroll_length + 1, config.batch_size
  assert batch.action.shape == (t1, b) and batch.behaviour_logits.shape == (t1, b, num_actions)
  assert batch.obs['glyphs'].shape == (t1, b, 21, 79) and batch.obs['glyphs'].max() < 5977
  assert set(np.unique(batch.task_id)) == set(range(plan.num_tasks))
  assert (batch.obs['task_id'] == batch.task_id).all()


def test_gpu_suite_runs_at_ci_size_on_a_cpu():
  # Every config at float32, and bfloat16 for two of them (each entry is a
  # compilation; CI's time is kept for the rest).
  entries = [(name, 'float32') for name, _, _ in benchmark.GPU_SUITE] + [
      ('Pong, Nature CNN', 'bfloat16'), ('main job (NetHack)', 'bfloat16')]
  lines = []
  rows = benchmark.run_suite(small=True, seconds=0.1, warmup=0.0, stages=('learner',),
                             out=lines.append, entries=entries)
  assert sorted((r['config'], r['dtype']) for r in rows) == sorted(entries)
  assert all(r['learner_ups'] > 0 and r['learner_sps'] > 0 for r in rows)
  table = lines[-1].splitlines()
  assert 'cpu device' in table[0] and 'CPU cores' in table[0]
  assert table[2].startswith('| config | dtype |') and len(table) == 4 + len(rows)
