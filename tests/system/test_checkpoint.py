"""Checkpoints hold the whole learner state; a resumed run continues its
counters, schedule and PopArt statistics from exactly where it stopped; a
checkpoint trained on one kernel path evaluates and resumes on the other."""

import dataclasses
import json

import jax
import numpy as np

from agents.checkpoint import Checkpointer
from analysis.run_loading import load_run
from configs import atari_single, cartpole_popart
from tests.support.training_runs import train


def _config(workdir, updates):
  config = cartpole_popart.get_config('smoke')
  config.workdir = str(workdir)
  config.checkpoint_every_steps = config.unroll_length * config.batch_size  # every update
  config.keep_intermediate = True
  config.total_env_steps = updates * config.unroll_length * config.batch_size
  return config


def _equal(a, b):
  return all(jax.tree.leaves(jax.tree.map(
      lambda x, y: bool(np.array_equal(np.asarray(x), np.asarray(y))), a, b)))


def test_every_checkpoint_is_kept_and_holds_the_final_state(tmp_path):
  config = _config(tmp_path / 'run', updates=3)
  state, workdir = train(config)
  per_update = config.unroll_length * config.batch_size
  ckpt = Checkpointer(workdir, read_only=True)
  assert ckpt.steps() == (0, per_update, 2 * per_update, 3 * per_update)  # 0: the init
  restored = ckpt.restore(state)
  assert restored['env_steps'] == 3 * per_update
  assert _equal(restored['state'], state)  # params, PopArt stats, optimiser state, step


def test_only_the_last_checkpoints_without_keep_intermediate(tmp_path):
  config = _config(tmp_path / 'run', updates=4)
  config.keep_intermediate = False
  _, workdir = train(config)
  assert len(Checkpointer(workdir, read_only=True).steps()) == 2


def test_resume_continues_counters_schedule_and_popart(tmp_path):
  workdir = tmp_path / 'run'
  first_state, _ = train(_config(workdir, updates=2))
  with open(workdir / 'metrics.jsonl') as f:
    first = [json.loads(line) for line in f]

  # The same command with a larger budget resumes at the checkpoint.
  from agents.trainer import Trainer
  from configs.validation import validate_spec
  config = _config(workdir, updates=4)
  trainer = Trainer(validate_spec(config))
  try:
    assert trainer.resumed_from == 2 * config.unroll_length * config.batch_size
    assert trainer.env_steps == trainer.resumed_from
    assert _equal(trainer.state, first_state)  # PopArt mu/nu, params, schedule count, step
  finally:
    trainer.close()

  second_state, _ = train(_config(workdir, updates=4))
  assert int(second_state.step) == 4
  schedule_count = second_state.opt_state.inner_state[1][1].count
  assert int(schedule_count) == 4  # the learning-rate schedule went on, not restarted
  with open(workdir / 'metrics.jsonl') as f:
    records = [json.loads(line) for line in f]
  assert records[:len(first)] == first  # appended, not overwritten
  resumed = records[len(first):]
  assert resumed and resumed[0]['learner_steps'] == 3
  assert resumed[-1]['env_steps'] == config.total_env_steps


def test_a_checkpoint_trained_on_the_cpu_path_evaluates_and_resumes_on_the_xla_path(tmp_path):
  config = atari_single.get_config('game=Pong,smoke')   # the fused Nature CNN on CPU
  config.workdir = str(tmp_path / 'run')
  _, workdir = train(config)
  run = load_run(workdir)
  assert run.network.kernels == 'auto'
  rng = np.random.default_rng(0)
  obs = {'frames': rng.integers(0, 256, (1, 20, 4, 84, 84), dtype=np.uint8),
         'prev_action': np.zeros((1, 20), np.int32), 'prev_reward': np.zeros((1, 20), np.float32),
         'task_id': np.zeros((1, 20), np.int32)}
  first = np.ones((1, 20), bool)
  logits = {impl: dataclasses.replace(run.network, kernels=impl).apply(
      run.variables, obs, first, ())[0] for impl in ('cpu', 'xla')}
  scale = np.abs(np.asarray(logits['xla'], np.float64)).max()
  np.testing.assert_allclose(logits['cpu'], logits['xla'], rtol=0, atol=2e-5 * max(scale, 1e-6))
  # Resumed with the other kernels (a field free to change): it trains on.
  steps = config.total_env_steps
  config.network.kernels = 'xla'
  config.total_env_steps = 2 * steps
  state, _ = train(config)
  assert state is not None and load_run(workdir).env_steps >= 2 * steps
  assert load_run(workdir).spec.network.kernels == 'xla'
