"""analysis/benchmark.py: the learner stage's synthetic batch (the GPU suite at
CI size: tests/system/test_benchmark_suite.py)."""

import numpy as np

from configs import nethack_popart
from configs.validation import validate_spec
from envs import registry
from analysis import benchmark


def test_synthetic_batch_is_shaped_as_the_actors_send_it():
  config = nethack_popart.get_config('smoke')
  spec = validate_spec(config)
  plan = spec.plan
  group = plan.actor_env_groups[0][0]
  num_actions, obs_spec = registry.env_spaces(group.env_id, group.env_kwargs,
                                              plan.observation_keys)
  batch = benchmark.synthetic_batch(spec, num_actions, obs_spec)
  t1, b = config.unroll_length + 1, config.batch_size
  assert batch.action.shape == (t1, b) and batch.behaviour_logits.shape == (t1, b, num_actions)
  assert batch.obs['glyphs'].shape == (t1, b, 21, 79) and batch.obs['glyphs'].max() < 5977
  assert set(np.unique(batch.task_id)) == set(range(plan.num_tasks))
  assert (batch.obs['task_id'] == batch.task_id).all()
