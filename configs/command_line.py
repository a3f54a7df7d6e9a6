"""The `--config` flag of the commands that train (launch/train.py,
launch/pbt.py) and of the tools that run a config (launch/benchmark.py,
launch/diagnose_update.py, launch/inspect_frames.py): an ml_collections
config file with its variant and `--config.x=...` overrides. A mistake in
it (a file that does not load, a field the config lacks, a value of the
wrong type) exits with one line naming it and status 2, not a traceback.
Importing this module defines the flag: only those commands import it.
"""

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
  """Reports a config mistake in one line on stderr and exits with status 2.

  The line is 'error: <reason> (in: <the --config arguments>)': for an
  override of a field the config lacks (AttributeError, KeyError), 'unknown
  config field <field>'; otherwise the error's last non-empty line (where
  config_flags puts get_config's own message), or its type's name.

  Args:
    e: the error the flag parser or the config loader raised.
    argv: the command line; its `--config...` arguments are quoted.

  Raises:
    SystemExit: always, with status 2; the function does not return.
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
  """absl's flag parser, for app.run's flags_parser, with config mistakes in one line.

  Args:
    argv: the command line.

  Returns:
    The arguments absl's flags leave unparsed (argv[0] first).

  Raises:
    SystemExit: status 2 (`exit_with_config_error`) when a flag, the config
      file or an override is wrong.
  """
  try:
    return flags.FLAGS(argv)
  except _USER_ERRORS as e:
    exit_with_config_error(e, argv)


def load_config():
  """The --config flag's config, loaded, with quiet logs.

  Sets absl's verbosity to WARNING and silences the warning on lowered
  precision before the file is loaded.

  Returns:
    The config (a locked ml_collections.ConfigDict).

  Raises:
    SystemExit: status 2 (`exit_with_config_error`) when the file does not
      load or an override does not apply.
  """
  logging.set_verbosity(logging.WARNING)
  warnings.filterwarnings('ignore', message='.*precision lowered by casting.*')
  try:
    config = CONFIG.value
    config['seed']  # config_flags loads the file lazily: make it happen here
  except _USER_ERRORS as e:
    exit_with_config_error(e, sys.argv)
  return config
