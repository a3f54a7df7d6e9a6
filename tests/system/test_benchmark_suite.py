"""analysis/benchmark.py --suite=gpu at CI size on this CPU: every config's
learner stage, both dtypes, one table (a compilation per entry: minutes);
and the train stage on Pong at smoke size."""

import pytest

from analysis import benchmark


@pytest.mark.slow  # the full suite only, not the CI tier (docs/testing.md): every stage of the GPU suite, 2-3 min
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


def test_train_stage_measures_a_run_of_the_benchmarks_length():
  """--stages=train sets 10**12 env steps (more optimiser steps than optax's
  int32 counter holds) and measures the whole loop after its warm-up."""
  from configs import atari_single
  from configs.validation import validate_spec
  config = benchmark.quiet(atari_single.get_config('game=Pong,smoke'))
  sps, timings = benchmark.bench_train(validate_spec(config), seconds=2.0, warmup=1.0)
  assert sps > 0 and config.total_env_steps == 10**12
  assert any(k.startswith('timing/learner') for k in timings), timings
