"""Where a trained attention agent looks, over one episode.

  python launch/attention_maps.py --workdir=runs/pong_attention --frames=0:200 --video
  python launch/attention_maps.py --workdir=runs/nethack_attention --task=mon-hum-neu-mal

Writes <output>/step_<t>.png for each step in [A, B) (the screen, then each query's weights laid on
it, one scale per query over the range), overview.png, attention.json (per step and query: entropy,
peak weight, argmax cell) and with --video / --gif a video. Method: analysis/attention_maps.py.
"""

import json
import os
import warnings

from absl import flags
from absl import logging
import numpy as np
from PIL import Image

from agents.checkpoint import CheckpointError
from analysis import attention_maps as att
from analysis.episode_range import FramesError, parse_frames
from analysis.run_loading import load_run
from configs.validation import ConfigError
from envs import render
from infra import atomic_write
from infra import cli
from rundir.run_folder import RunFolderError

_WORKDIR = flags.DEFINE_string('workdir', None, 'Run folder with checkpoints.')
_TASK = flags.DEFINE_string('task', None, 'Task name (as in the config); default the first.')
_FRAMES = flags.DEFINE_string('frames', '0:100', 'Steps A:B of the episode to draw.')
_STEP = flags.DEFINE_integer('step', None, 'Checkpoint env step; default the latest.')
_GREEDY = flags.DEFINE_bool('greedy', False, 'Play the argmax action instead of sampling.')
_VIDEO = flags.DEFINE_bool('video', False, 'Also write the strips as attention.mp4.')
_GIF = flags.DEFINE_bool('gif', False, 'Also write the strips as attention.gif.')
_FPS = flags.DEFINE_float('fps', 15.0, 'Frames per second of the video and GIF.')
_ROWS = flags.DEFINE_integer('rows', 4, 'Steps in overview.png, spread over the range.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the episode.')
_OUTPUT = flags.DEFINE_string('output', '', 'Folder; default <workdir>/attention/<step>_<task>.')


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {" ".join(argv[1:])}')
  logging.set_verbosity(logging.ERROR)  # orbax's notes on read-only checkpoint folders
  warnings.filterwarnings('ignore', message='.*precision lowered by casting.*')
  try:
    _draw_to_files()
  except (att.AttentionError, FramesError, FileNotFoundError, ConfigError, CheckpointError,
          RunFolderError) as e:
    cli.fail(str(e))


def _draw_to_files() -> None:
  start, stop = parse_frames(_FRAMES.value)
  if _ROWS.value < 1:
    raise att.AttentionError(f'--rows must be at least 1, got {_ROWS.value}')
  if _FPS.value <= 0:
    raise att.AttentionError(f'--fps must be positive, got {_FPS.value:g}')
  run = load_run(_WORKDIR.value, _STEP.value)
  names = run.plan.task_names
  task = _TASK.value or names[0]
  if task not in names:
    raise att.AttentionError(f'unknown task {task!r}; the run has {", ".join(names)}')
  steps = att.attention_episode(run, names.index(task), start, stop, _GREEDY.value,
                                _SEED.value)
  if not steps:
    raise att.AttentionError(f'the episode ended before step {start}')
  nethack = run.network.torso == 'nle_attention'
  scales, rows = att.summary(steps)
  strips = [att.draw_strip(s, scales, nethack) for s in steps]
  picks = np.unique(np.linspace(0, len(strips) - 1, min(_ROWS.value, len(strips))).round()
                    .astype(int))
  overview = np.concatenate([np.pad(strips[i], ((0, 4), (0, 0), (0, 0)), constant_values=255)
                             for i in picks])[:-4]
  output = _OUTPUT.value or os.path.join(run.workdir, 'attention', f'{run.env_steps}_{task}')
  try:   # each file whole or not at all; a full disk is one line
    os.makedirs(output, exist_ok=True)
    for strip, s in zip(strips, steps):
      _write_png(os.path.join(output, f'step_{s.step:05d}.png'), strip)
    _write_png(os.path.join(output, 'overview.png'), overview)
    with atomic_write.atomic_open(os.path.join(output, 'attention.json')) as f:
      json.dump({'task': task, 'env_steps': run.env_steps, 'network': run.network.torso,
                 'grid': list(steps[0].weights.shape[1:]), 'scales': scales,
                 'overview_steps': [steps[i].step for i in picks], 'steps': rows}, f, indent=1)
    if _GIF.value:
      with atomic_write.atomic_path(os.path.join(output, 'attention.gif')) as tmp:
        render.write_gif(tmp, strips, fps=_FPS.value)
    if _VIDEO.value:
      with atomic_write.atomic_path(os.path.join(output, 'attention.mp4')) as tmp:
        render.write_mp4(tmp, strips, fps=_FPS.value)
  except render.VideoError as e:
    raise att.AttentionError(f'{e} (the PNGs and attention.json are written)') from None
  except OSError as e:
    raise att.AttentionError(f'cannot write into {output}: {e.strerror or e}') from None
  print(f'wrote {len(strips)} strips (steps {steps[0].step}..{steps[-1].step}) to {output}')


def _write_png(path: str, image: np.ndarray) -> None:
  with atomic_write.atomic_path(path) as tmp:
    Image.fromarray(image).save(tmp)


if __name__ == '__main__':
  flags.mark_flag_as_required('workdir')
  cli.run(main)
