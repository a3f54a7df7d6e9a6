"""What the learner's updates do on real unrolls: per-term gradients, the
clip, the optimiser step, the policy change and the off-policy statistics.

  python launch/diagnose_update.py --config=configs/atari_single.py:game=Pong
  python launch/diagnose_update.py --workdir=runs/pong --step=1000000

At the start and every --every of --train_updates training updates it reports, averaged over
--batches batches from the same state, each loss term's gradient norm (per module too), the clip
factor, the step against the learning rate, the KL of the update, rho statistics and the policy lag
(analysis/update_stats.py). --workdir starts from a run's checkpoint. --advantage_groups=N instead
measures how much of each task's advantage signal per-minibatch normalisation keeps
(analysis/advantage_groups.py).
"""

import json
import tempfile

from absl import app
from absl import flags
from absl import logging
from agents.checkpoint import CheckpointError
from analysis import advantage_groups
from analysis import run_loading
from analysis.update_diagnosis import Diagnoser
from configs import command_line   # defines --config; its file's mistakes are one line
from configs import validation
from configs.validation import ConfigError
from infra import atomic_write
from infra import cli
from rl import algorithms
from rundir.run_folder import RunFolderError

_CONFIG = command_line.CONFIG
_WORKDIR = flags.DEFINE_string('workdir', None, 'Run folder: its config and checkpoint.')
_STEP = flags.DEFINE_integer('step', None, 'Checkpoint env step (with --workdir); default latest.')
_BATCHES = flags.DEFINE_integer('batches', 4, 'Batches averaged at each measured point.')
_TRAIN_UPDATES = flags.DEFINE_integer('train_updates', 0, 'Real training updates to follow.')
_EVERY = flags.DEFINE_integer('every', 50, 'Measure every this many training updates.')
_OUTPUT = flags.DEFINE_string('output', '', 'Optional JSON file for every measured point.')
_ADVANTAGE_GROUPS = flags.DEFINE_integer(
    'advantage_groups', 0, 'Instead of the gradient measurements: this many batches\' advantages '
    'before normalisation, against each task\'s normalised over the whole batch '
    '(analysis/advantage_groups.py).')

SHOWN = ('grad/policy', 'grad/baseline', 'grad/entropy', 'grad/total', 'clip_scale',
         'step/median', 'step/mean_over_lr', 'eps_dominated', 'kl_update', 'kl_update_max',
         'rho/mean', 'rho/min', 'rho/max', 'rho/clipped', 'policy_lag', 'entropy')


def _load_config():
  if _WORKDIR.value:
    config = run_loading.load_config(_WORKDIR.value)
  elif _CONFIG.value is not None:
    config = command_line.load_config()
  else:
    raise app.UsageError('give --config or --workdir')
  with config.unlocked():
    config.workdir = tempfile.mkdtemp(prefix='diagnose-')  # the Trainer's own, unused
    config.wandb.mode = 'disabled'
    config.num_learner_devices = 1
  return config

def _print_point(updates, env_steps, point):
  print(f'\n== after {updates} training updates ({env_steps:,} env steps) ==')
  for key in SHOWN:
    if key in point:
      print(f'  {key:20s} {point[key]:.4g}')
  modules = sorted(k for k in point if k.count('/') == 2 and k.startswith('grad/'))
  print('  per module: ' + ', '.join(f'{k[5:]} {point[k]:.3g}' for k in modules))


def _advantage_groups(d, spec):
  try:
    d.start()
    batches = d.advantage_batches(_ADVANTAGE_GROUPS.value)
  finally:
    d.close()
  result = advantage_groups.report(batches, len(d.plan.task_names), d.plan.task_names)
  print(f'\n== advantages of {len(batches)} batches at {d.env_steps:,} env steps ==')
  print('\n'.join(advantage_groups.format_report(result)))
  _write({'config': spec.run.config_name, 'workdir': _WORKDIR.value, 'env_steps': d.env_steps,
          'advantage_groups': result})


def _write(content):
  if not _OUTPUT.value:
    return
  try:
    with atomic_write.atomic_open(_OUTPUT.value) as f:   # whole or not at all
      json.dump(content, f, indent=1)
  except OSError as e:   # a full disk: one line
    cli.fail(f'cannot write {_OUTPUT.value}: {e.strerror or e}')
  print(f'wrote {_OUTPUT.value}')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  logging.set_verbosity(logging.WARNING)
  if _ADVANTAGE_GROUPS.value > 0:
    ignored = [f'--{n}' for n in ('batches', 'train_updates', 'every') if flags.FLAGS[n].present]
    if ignored:   # not silently ignored
      raise app.UsageError(f'--advantage_groups measures N batches of its own; '
                           f'{", ".join(ignored)} belong to the gradient measurements')
  problem = _OUTPUT.value and atomic_write.output_problem(_OUTPUT.value)
  if problem:   # before measuring, not after
    cli.fail(f'{problem}')
  try:
    spec = validation.validate_spec(_load_config())   # the composition root
    if not spec.learner.by_term:
      able = ', '.join(n for n in algorithms.names() if algorithms.get(n).by_term)
      raise app.UsageError(f'diagnose_update splits a loss into its terms, which loss.name='
                           f'{spec.loss.name!r} does not (loss.name in {able} does; PPO runs '
                           'log ppo/clip_fraction, ppo/approx_kl and the health metrics instead)')
    d = Diagnoser(spec, _WORKDIR.value, _STEP.value)
  except (FileNotFoundError, ConfigError, CheckpointError, RunFolderError) as e:
    cli.fail(str(e))   # a missing run or step, a bad config.json: one line
  if _ADVANTAGE_GROUPS.value > 0:
    _advantage_groups(d, spec)
    return
  points = []
  try:
    d.start()
    updates = 0
    while True:
      point = d.measure(_BATCHES.value)
      point.update(updates=updates, env_steps=d.env_steps)
      points.append(point)
      _print_point(updates, d.env_steps, point)
      if updates >= _TRAIN_UPDATES.value:
        break
      for _ in range(min(_EVERY.value, _TRAIN_UPDATES.value - updates)):
        d.train()
        updates += 1
  finally:
    d.close()
  _write({'config': spec.run.config_name, 'workdir': _WORKDIR.value, 'points': points})


if __name__ == '__main__':
  cli.run(main, command_line.parse_flags)
