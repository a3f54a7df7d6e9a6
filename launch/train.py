"""Trains an IMPALA (+ PopArt) agent from an ml_collections config.

  python launch/train.py --config=configs/nethack_popart.py
  python launch/train.py --config=configs/atari_single.py:game=Pong,smoke
  python launch/train.py --config=configs/cartpole.py --config.learning_rate=1e-3

Wires config -> validation -> run folder and logger -> Sebulba trainer.
A config mistake stops the run before any work with one line naming the field.
"""

import os
import signal
import sys
import threading
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'Experiment config: path/to/config.py[:variant,key=value]',
    lock_config=True)
_VALIDATE_ONLY = flags.DEFINE_bool(
    'validate_only', False, 'Check the config (and overrides), print it as JSON and exit.')


def train(config):
  """Validates, trains and logs; returns (final learner state, workdir).

  Raises configs.validation.ConfigError before any work on a bad config.
  """
  from agents.sebulba import Trainer
  from configs import validation
  from launch.run_logger import RunLogger, resolve_workdir

  plan = validation.validate(config)
  with config.unlocked():
    config.workdir = resolve_workdir(config)
  logger = RunLogger(config.workdir, config, plan.task_names)
  logger.message(f'run folder: {config.workdir}')
  trainer, state = None, None
  previous_sigterm = _sigterm_interrupts()
  try:
    trainer = Trainer(config, plan)
    if trainer.resumed_from is not None:
      logger.message(f'resuming from the checkpoint at env step {trainer.resumed_from:,}')
    state = trainer.run(logger.write)
    trainer.save_checkpoint()
  except KeyboardInterrupt:
    if trainer is not None:
      trainer.close()
      trainer.save_checkpoint()
      state = trainer.state
    logger.message(f'interrupted at env step {trainer.env_steps if trainer else 0:,}; '
                   f'checkpoint and metrics are in {config.workdir}')
  finally:
    if previous_sigterm is not None:
      signal.signal(signal.SIGTERM, previous_sigterm)
    if trainer is not None:
      trainer.close()
    logger.close()
  return state, config.workdir


def _raise_interrupt(signum, frame):
  raise KeyboardInterrupt(f'signal {signum}')


def _sigterm_interrupts():
  """SIGTERM stops a run like Ctrl-C (final checkpoint first); returns the
  previous handler, or None off the main thread where handlers cannot be set.

  SIGINT gets Python's KeyboardInterrupt handler too: a process started in
  the background by a shell (`cmd &`, nohup) inherits SIGINT *ignored*, and
  `kill -INT` would then do nothing."""
  if threading.current_thread() is not threading.main_thread():
    return None
  signal.signal(signal.SIGINT, signal.default_int_handler)
  return signal.signal(signal.SIGTERM, _raise_interrupt)


_USER_ERRORS = (flags.Error, AttributeError, KeyError, ValueError, TypeError, OSError)


def _exit_with_config_error(e: BaseException, argv) -> None:
  """One line naming the mistake instead of a traceback; exit status 2."""
  if isinstance(e, (AttributeError, KeyError)):  # override of a field the config lacks
    text = str(e).strip('\'"').replace("\\'", "'").replace('\\n', ' ')
    reason = f'unknown config field {text}'
  else:
    # config_flags embeds get_config's traceback; its last line is the reason.
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    reason = lines[-1] if lines else type(e).__name__
  overrides = ' '.join(a for a in argv[1:] if a.startswith('--config'))
  print(f'error: {reason} (in: {overrides or "no --config given"})', file=sys.stderr)
  sys.exit(2)


def parse_flags(argv):
  try:
    return flags.FLAGS(argv)
  except _USER_ERRORS as e:
    _exit_with_config_error(e, argv)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  from configs.validation import ConfigError
  logging.set_verbosity(logging.WARNING)
  warnings.filterwarnings('ignore', message='.*precision lowered by casting.*')
  try:
    config = _CONFIG.value
    config['seed']  # config_flags loads the file lazily: make it happen here
  except _USER_ERRORS as e:
    _exit_with_config_error(e, sys.argv)
  try:
    if _VALIDATE_ONLY.value:
      from configs.validation import validate
      plan = validate(config)
      print(config.to_json_best_effort(sort_keys=True))
      print(f'config OK: {plan.num_tasks} task(s), {plan.total_learner_steps:,} learner steps',
            file=sys.stderr)
      return
    train(config)
  except ConfigError as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)


if __name__ == '__main__':
  flags.mark_flag_as_required('config')
  app.run(main, flags_parser=parse_flags)
