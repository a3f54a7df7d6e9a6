"""A learner that fails safely: a non-finite loss stops the run with one line
after saving the last good state; an actor's exception stops the run with
that error instead of a hang; nothing written before is lost."""

import json
import os
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from agents.checkpoint import Checkpointer
from agents.trainer import ActorFailed
from agents.update_checks import NonFiniteError, first_non_finite
from configs import cartpole, cartpole_popart
from tests.support.faults import make_env_step_fail, make_rewards_nan, nan_reward_call
from tests.support.training_runs import train

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _metrics(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f]


def test_first_non_finite_names_the_first_bad_quantity():
  ok = {'loss/total': 1.0, 'grad_norm': 2.0, 'popart/mu': np.zeros(2), 'popart/sigma': np.ones(2)}
  assert first_non_finite(ok) is None
  assert first_non_finite({**ok, 'grad_norm': np.inf}) == 'grad_norm'
  assert first_non_finite({**ok, 'popart/sigma': np.array([1.0, np.nan])}) == 'popart/sigma'
  assert first_non_finite({**ok, 'loss/total': np.nan, 'grad_norm': np.nan}) == 'loss/total'


def test_nan_rewards_stop_the_run_after_saving_the_last_good_state(tmp_path, monkeypatch):
  config = cartpole_popart.get_config('smoke')
  config.workdir = str(tmp_path / 'run')
  config.total_env_steps = 10 * config.unroll_length * config.batch_size
  make_rewards_nan(monkeypatch, nan_reward_call(4, config.unroll_length))  # the 4th update's batch
  per_update = config.unroll_length * config.batch_size
  with pytest.raises(NonFiniteError) as e:
    train(config)
  assert str(e.value).startswith(f'non-finite loss/total (nan) at learner step 4 '
                                 f'(env step {4 * per_update:,})')
  assert f'last good state is saved at env step {3 * per_update:,}' in str(e.value)
  records = _metrics(config.workdir)  # logged every update by the smoke config
  assert [r['learner_steps'] for r in records] == [1, 2, 3]
  checkpointer = Checkpointer(config.workdir, read_only=True)
  assert checkpointer.latest_step() == 3 * per_update
  saved = checkpointer.restore_raw(3 * per_update)['state']
  assert int(saved['step']) == 3
  assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(saved['params']))
  assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(saved['popart']))


def test_nan_stop_from_the_command_line_is_one_line(tmp_path):
  env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
  proc = subprocess.run(
      [sys.executable, '-m', 'tests.support.train_with_faults',
       f'--nan_reward_step={nan_reward_call(2, 4)}',
       '--config=configs/cartpole.py:smoke', f'--config.workdir={tmp_path / "run"}',
       '--config.total_env_steps=320'],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
  assert proc.returncode == 1, proc.stderr
  assert 'Traceback' not in proc.stderr
  errors = [line for line in proc.stderr.splitlines() if line.startswith('error:')]
  assert errors == ['error: NonFiniteError: non-finite loss/total (nan) at learner step 2 '
                    f'(env step 16); the last good state is saved at env step 8 in '
                    f'{tmp_path / "run" / "checkpoints"}'], proc.stderr


@pytest.mark.parametrize('num_actors', [1, 2])
def test_an_actor_exception_stops_the_run_with_its_error(tmp_path, monkeypatch, num_actors):
  """With two actors the healthy one keeps the queue full: the dead one must
  still be noticed (it is checked at every block, not only on an empty queue)."""
  make_env_step_fail(monkeypatch, lambda i: i == num_actors - 1, after_steps=50)
  config = cartpole.get_config('smoke')
  config.workdir = str(tmp_path / 'run')
  config.actors.num_actors = num_actors
  config.total_env_steps = 100_000_000
  start = time.time()
  with pytest.raises(ActorFailed, match=rf"actor-{num_actors - 1} failed: "
                                        r"RuntimeError\('env exploded on purpose'\)"):
    train(config)
  assert time.time() - start < 120
  assert _metrics(config.workdir), 'metrics written before the failure are kept'
