"""The `--config` flag of the commands that run a config, with its variant
and `--config.x=...` overrides: a mistake in it exits with one line and
status 2, not a traceback. Importing this module defines the flag."""

import sys
import warnings

from absl import flags
from absl import logging
from ml_collections import config_flags

CONFIG = config_flags.DEFINE_config_file(
    'config', None, 'Experiment config: path/to/config.py[:variant,key=value]',
    lock_config=True)

_USER_ERRORS = (flags.Error, AttributeError, KeyError, ValueError, TypeError, OSError)


def exit_with_config_error(e: BaseException, argv) -> None:
  """Prints 'error: <reason> (in: <the --config arguments>)' and exits with status 2.

  The reason is 'unknown config field <field>' for an override of a field the config lacks, else the
  error's last non-empty line (where config_flags puts get_config's own message).
  """
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
  """absl's flag parser for app.run's flags_parser, config mistakes exiting
  as `exit_with_config_error`."""
  try:
    return flags.FLAGS(argv)
  except _USER_ERRORS as e:
    exit_with_config_error(e, argv)


def load_config():
  """The --config flag's config (locked), loaded with quiet logs; a mistake
  exits as `exit_with_config_error`."""
  logging.set_verbosity(logging.WARNING)
  warnings.filterwarnings('ignore', message='.*precision lowered by casting.*')
  try:
    config = CONFIG.value
    config['seed']  # config_flags loads the file lazily: make it happen here
  except _USER_ERRORS as e:
    exit_with_config_error(e, sys.argv)
  return config
