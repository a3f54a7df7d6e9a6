"""A finished run's record, small enough for git: config.json, metrics.jsonl
gzipped and eval/*.json, without checkpoints, wandb files or logs.

  python launch/archive_run.py runs/six_popart docs/data/popart_atari/six_popart

The run folder's lock is held while copying (a run still training is
refused); an existing archive is replaced only with --overwrite.
"""

from absl import app
from absl import flags

from infra import cli
from rundir import archive

_OVERWRITE = flags.DEFINE_bool('overwrite', False, 'Replace an existing archive.')


def main(argv):
  if len(argv) != 3:
    raise app.UsageError('give a run folder and the archive folder to write')
  try:
    written = archive.archive(argv[1], argv[2], _OVERWRITE.value)
  except archive.ArchiveError as e:
    cli.fail(str(e))   # one line, exit status 2
  print(f'{argv[2]}: ' + ', '.join(written))


if __name__ == '__main__':
  cli.run(main)
