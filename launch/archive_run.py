"""A finished run's record, small enough to keep in git: its config.json,
its metrics.jsonl gzipped (metrics.jsonl.gz) and its evaluations (eval/*.json),
without checkpoints, wandb files or logs.

  python launch/archive_run.py runs/six_popart docs/data/popart_atari/six_popart

launch/plot_runs.py, launch/run_table.py and the analysis notebook read an
archive as they read the run folder (analysis/run_metrics.load_metrics reads
metrics.jsonl.gz). The run folder's lock is held while it is copied, so a
run still training is refused in one line; an existing archive is replaced
only with --overwrite, and never one that is, holds or lies in the run
folder. The gzip header carries no time or name, so archiving
the same run twice gives the same bytes.
"""

import sys

from absl import app
from absl import flags

from rundir import archive

_OVERWRITE = flags.DEFINE_bool('overwrite', False, 'Replace an existing archive.')


def main(argv):
  if len(argv) != 3:
    raise app.UsageError('give a run folder and the archive folder to write')
  try:
    written = archive.archive(argv[1], argv[2], _OVERWRITE.value)
  except archive.ArchiveError as e:
    print(f'error: {e}', file=sys.stderr)   # one line, exit status 2
    sys.exit(2)
  print(f'{argv[2]}: ' + ', '.join(written))


if __name__ == '__main__':
  app.run(main)
