"""Evaluates a trained run's checkpoint: N whole episodes per task, a table, a JSON file.

  python launch/evaluate.py --workdir=runs/pong_1m
  python launch/evaluate.py --workdir=runs/pong_1m --step=500000 --episodes=30 --greedy
  python launch/evaluate.py --workdir=runs/nethack_popart-demo --episodes=8 --video

Writes <workdir>/eval/<env_steps>.json and, with --video, one video per task of its first episode
(analysis/run_evaluation.py says where; --overwrite replaces a step's record). A missing run,
checkpoint or step stops it with one line and exit status 2.
"""

import os
import sys
import warnings

from absl import app
from absl import flags
from absl import logging

from agents.checkpoint import CheckpointError
from analysis.run_evaluation import run_evaluation
from configs.validation import ConfigError
from infra import cli
from rundir.run_folder import RunFolderError

_WORKDIR = flags.DEFINE_string('workdir', None, 'Run folder written by launch/train.py.')
_STEP = flags.DEFINE_integer('step', None, 'Env step of the checkpoint; default: the latest.')
_EPISODES = flags.DEFINE_integer('episodes', 10, 'Whole episodes per task.', lower_bound=1)
_GREEDY = flags.DEFINE_bool('greedy', False, 'Argmax actions instead of sampling the policy.')
_UNIFORM = flags.DEFINE_bool('uniform', False, 'Uniformly random actions instead of the '
                             'policy: the baseline for the same tasks (eval/<step>_uniform.json).')
_VIDEO = flags.DEFINE_bool('video', False, "An MP4 of each task's first episode "
                           '(a GIF without imageio-ffmpeg).')
_MAX_VIDEO_FRAMES = flags.DEFINE_integer(
    'max_video_frames', 2000, 'Frames per video at most (a NetHack game can last 100k steps).')
_MAX_STEPS = flags.DEFINE_integer(
    'max_steps', None, 'Safety cap on batched env steps per task; episodes unfinished at the '
    'cap are dropped and the task is marked "(max_steps)". Default: no cap.', lower_bound=1)
_NUM_ENVS = flags.DEFINE_integer('num_envs', 8, 'Envs per task stepped in parallel (at most '
                                  '--episodes).', lower_bound=1)
_SEED = flags.DEFINE_integer('seed', 0, 'Seeds the envs and the action sampling.')
_OVERWRITE = flags.DEFINE_bool('overwrite', False, 'Replace eval/<step>.json if it exists '
                               'instead of writing eval/<step>.<n>.json beside it.')

def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  logging.set_verbosity(logging.ERROR)  # orbax's notes on read-only checkpoint folders
  warnings.filterwarnings('ignore', message='.*precision lowered by casting.*')
  try:
    run_evaluation(_WORKDIR.value, _STEP.value, _EPISODES.value, _GREEDY.value, _VIDEO.value,
                   _MAX_VIDEO_FRAMES.value, _MAX_STEPS.value, _NUM_ENVS.value, _SEED.value,
                   uniform=_UNIFORM.value, overwrite=_OVERWRITE.value)
  except (FileNotFoundError, ConfigError, CheckpointError, RunFolderError) as e:
    cli.fail(str(e))
  except OSError as e:   # a full disk while writing eval/ (nothing half-written is left)
    print(f'error: cannot write into {os.path.join(_WORKDIR.value, "eval")}: {e.strerror or e}',
          file=sys.stderr)
    sys.exit(2)


if __name__ == '__main__':
  flags.mark_flag_as_required('workdir')
  cli.run(main)
