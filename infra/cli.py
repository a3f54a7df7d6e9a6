"""How every launch/ command starts: absl's app.run, where a flag that does not parse, a required
flag left out or an app.UsageError is one line 'error: <why>' with exit status 2 (not absl's usage
text with 1, which some commands use to say a result missed its bar)."""

import sys
from typing import Callable, NoReturn

from absl import app
from absl import flags


def fail(reason: str) -> NoReturn:
  """Prints 'error: <reason>' (its lines joined by '; ') and exits with status 2."""
  reason = '; '.join(line.strip() for line in reason.splitlines() if line.strip())
  print(f'error: {reason}', file=sys.stderr)
  sys.exit(2)


def parse_flags(argv):
  """absl's flag parser for app.run, a flag mistake exiting as `fail`."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    fail(str(e))


def run(main: Callable, flags_parser: Callable = parse_flags) -> None:
  """app.run(main) with `flags_parser`; an app.UsageError from `main` exits as `fail`."""
  def checked(argv):
    try:
      return main(argv)
    except app.UsageError as e:
      fail(str(e))
  app.run(checked, flags_parser=flags_parser)
