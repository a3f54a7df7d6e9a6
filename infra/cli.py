"""How every launch/ command starts: absl's app.run, with a usage mistake as
one line. A flag that does not parse, a required flag left out, or an
app.UsageError the command raises (a missing or contradictory flag) prints
'error: <why>' and exits with status 2, not absl's usage text or FATAL line
with status 1 (which some commands use to say a result missed its bar)."""

import sys
from typing import Callable, NoReturn

from absl import app
from absl import flags


def usage_error(reason: str) -> NoReturn:
  """Prints 'error: <reason>' (its lines joined by '; ') to stderr and exits
  with status 2."""
  reason = '; '.join(line.strip() for line in reason.splitlines() if line.strip())
  print(f'error: {reason}', file=sys.stderr)
  sys.exit(2)


def parse_flags(argv):
  """absl's flag parser for app.run, a flag mistake exiting as `usage_error`."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    usage_error(str(e))


def run(main: Callable, flags_parser: Callable = parse_flags) -> None:
  """app.run(main) with `flags_parser`; an app.UsageError from `main` exits
  as `usage_error`."""
  def checked(argv):
    try:
      return main(argv)
    except app.UsageError as e:
      usage_error(str(e))
  app.run(checked, flags_parser=flags_parser)
