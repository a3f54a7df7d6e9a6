"""Throughput of a config, stage by stage, or of a suite of configs as one table.

  python launch/benchmark.py --config=configs/atari_single.py:game=Pong
  python launch/benchmark.py --suite=gpu --small --seconds=2

Each stage uses the config's envs, actor threads and batch, measured after a warm-up: raw (env
stepping, random actions), actors (with inference, no learner), loop (one actor's own cost per agent
step with a stand-in env and policy, agents/standin.py), learner (updates/s on one synthetic batch,
and the update's memory), train (the full loop). --suite=gpu: the learner and train stages of four
configs at float32 and bfloat16 (docs/gpu.md); --small shrinks them to smoke size.
"""

import json
import os
import resource

from absl import app
from absl import flags
from absl import logging

from analysis import benchmark
from configs import command_line   # defines --config; its file's mistakes are one line
from configs.validation import ConfigError, validate_spec
from infra import atomic_write
from infra import cli

_CONFIG = command_line.CONFIG
_STAGES = flags.DEFINE_list('stages', ['raw', 'actors', 'train'],
                            'Stages to measure (raw, actors, loop, learner, train).')
_SUITE = flags.DEFINE_enum('suite', None, ['gpu'], 'Measure a suite of configs instead of --config.')
_SMALL = flags.DEFINE_bool('small', False, "--suite: every config at smoke size (CI's size).")
_SECONDS = flags.DEFINE_float('seconds', 30.0, 'Measured seconds per stage.')
_WARMUP = flags.DEFINE_float('warmup', 10.0, 'Seconds before measuring (compilation, fill).')
_OUTPUT = flags.DEFINE_string('output', '', 'Optional JSON file for the results.')


STAGES = ('raw', 'actors', 'loop', 'learner', 'train')


def _check_flags() -> None:
  """The flags' mistakes, found before anything is measured."""
  if not _SECONDS.value > 0:
    cli.fail(f'--seconds must be > 0, got {_SECONDS.value}')
  if not _WARMUP.value >= 0:
    cli.fail(f'--warmup must be >= 0, got {_WARMUP.value}')
  unknown = [s for s in _STAGES.value if s not in STAGES]
  if unknown:
    cli.fail(f'unknown stage(s) {", ".join(unknown)}; choose from {", ".join(STAGES)}')
  problem = _OUTPUT.value and atomic_write.output_problem(_OUTPUT.value)
  if problem:   # a missing folder, or a folder given as the file
    cli.fail(problem)


def _write_output(results) -> None:
  """--output's JSON, whole or not at all; a full disk is one line."""
  if not _OUTPUT.value:
    return
  try:
    with atomic_write.atomic_open(_OUTPUT.value) as f:
      json.dump(results, f, indent=1)
  except OSError as e:
    cli.fail(f'cannot write {_OUTPUT.value}: {e.strerror or e}')


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  _check_flags()
  if _SUITE.value:
    if _CONFIG.value is not None:
      raise app.UsageError('give --suite or --config, not both')
    stages = ('learner', 'train')
    if _STAGES.present:
      stages = tuple(_STAGES.value)
      if not set(stages) <= {'learner', 'train'}:
        raise app.UsageError(f'--suite measures the stages learner and train, not {stages}')
    rows = benchmark.run_suite(_SMALL.value, _SECONDS.value, _WARMUP.value, stages)
    _write_output({'device': benchmark.device_line(), 'small': _SMALL.value, 'rows': rows})
    return
  if _CONFIG.value is None:
    raise app.UsageError('give --config (or --suite)')
  try:  # the composition root: past here only the spec travels
    spec = validate_spec(benchmark.quiet(command_line.load_config()))
  except ConfigError as e:
    cli.fail(str(e))
  plan, run = spec.plan, spec.run
  print(plan.describe_actors())
  results = {'config': run.config_name, 'num_actors': plan.num_actors,
             'envs_per_actor': spec.actors.envs_per_actor,
             'env_resources': {k: dict(v) for k, v in plan.actors.resources.items()},
             'actors_chosen': list(plan.actors.chosen),
             'network': spec.network.name,
             'batch_size': run.batch_size, 'unroll_length': run.unroll_length,
             'cpu_count': os.cpu_count()}
  for stage in _STAGES.value:
    fn = {'raw': benchmark.bench_raw, 'actors': benchmark.bench_actors,
          'loop': benchmark.bench_loop, 'learner': benchmark.bench_learner,
          'train': benchmark.bench_train}[stage]   # _check_flags checked the names
    out = fn(spec, _SECONDS.value, _WARMUP.value)
    if stage == 'loop':
      us, out = out
      results['loop_us_per_agent_step'] = round(us, 3)
      print(f'   loop: {us:10,.2f} microseconds per agent step (one actor thread, '
            f'stand-in env and policy)', flush=True)
    if stage == 'learner':
      ups, results['learner_memory_mib'] = out
      results['learner_updates_per_s'] = round(ups, 2)
      out = ups * run.batch_size * run.unroll_length
    if stage == 'train':
      out, results['train_timings'] = out
    results[f'{stage}_sps'] = round(out, 1)
    print(f'{stage:>7}: {out:10,.0f} agent steps/s', flush=True)
  results['peak_rss_mib'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  results['peak_rss_children_mib'] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
  print(json.dumps(results, indent=1))
  _write_output(results)


if __name__ == '__main__':
  cli.run(main, command_line.parse_flags)
