"""Saliency maps of a trained agent (Greydanus et al. 2017) over an episode.

  python launch/saliency.py --workdir=runs/pong --task=Pong --frames=0:100 --gif
  python launch/saliency.py --workdir=runs/nethack --task=mon-hum-neu-mal --frames=10:40

Writes <output>/frame_<t>.png for each step in [A, B): the observation
with the policy's saliency in red and the task's unnormalised value's in
green, one scale per colour over the range (analysis/saliency.py).
"""

import json
import os
import warnings

from absl import flags
from absl import logging
from PIL import Image

from agents.checkpoint import CheckpointError
from analysis import saliency as sal
from analysis.episode_range import FramesError, parse_frames
from analysis.saliency_episode import SaliencyError, explain
from analysis.run_loading import load_run
from configs.validation import ConfigError
from rundir.run_folder import RunFolderError
from envs import render
from infra import atomic_write
from infra import cli

_WORKDIR = flags.DEFINE_string('workdir', None, 'Run folder with checkpoints.')
_TASK = flags.DEFINE_string('task', None, 'Task name (as in the config); default the first.')
_FRAMES = flags.DEFINE_string('frames', '0:50', 'Steps A:B of the episode to explain.')
_STEP = flags.DEFINE_integer('step', None, 'Checkpoint env step; default the latest.')
_STRIDE = flags.DEFINE_integer('stride', 0, 'Grid stride: pixels (Atari, default 5) or '
                               'map cells per block (NetHack, default 3).')
_GREEDY = flags.DEFINE_bool('greedy', False, 'Play the argmax action instead of sampling.')
_GIF = flags.DEFINE_bool('gif', False, 'Also write the frames as saliency.gif.')
_SEED = flags.DEFINE_integer('seed', 0, 'Seed of the episode.')
_OUTPUT = flags.DEFINE_string('output', '', 'Folder; default <workdir>/saliency/<step>_<task>.')


def main(argv):
  if len(argv) > 1:
    cli.fail(f'unexpected arguments: {" ".join(argv[1:])}')
  logging.set_verbosity(logging.ERROR)  # orbax's notes on read-only checkpoint folders
  warnings.filterwarnings('ignore', message='.*precision lowered by casting.*')
  try:
    _explain_to_files()
  except (SaliencyError, FramesError, FileNotFoundError, ConfigError, CheckpointError,
          RunFolderError) as e:
    cli.fail(str(e))


def _explain_to_files() -> None:
  start, stop = parse_frames(_FRAMES.value)
  run = load_run(_WORKDIR.value, _STEP.value)
  names = run.plan.task_names
  task = _TASK.value or names[0]
  if task not in names:
    raise SaliencyError(f'unknown task {task!r}; the run has {", ".join(names)}')
  task_id = names.index(task)
  frames = explain(run, task_id, start, stop, _STRIDE.value, _GREEDY.value, _SEED.value)
  if not frames:
    raise SaliencyError(f'the episode ended before step {start}')
  output = _OUTPUT.value or os.path.join(run.workdir, 'saliency', f'{run.env_steps}_{task}')
  p_scale = max(f[3]['policy_max'] for f in frames)
  v_scale = max(f[3]['value_max'] for f in frames)
  images = [sal.overlay(image, pmap, vmap, p_scale, v_scale) for image, pmap, vmap, _ in frames]
  try:   # each file whole or not at all; a full disk is one line
    os.makedirs(output, exist_ok=True)
    for img, (_, _, _, info) in zip(images, frames):
      with atomic_write.atomic_path(os.path.join(output, f'frame_{info["step"]:05d}.png')) as tmp:
        Image.fromarray(img).save(tmp)
    with atomic_write.atomic_open(os.path.join(output, 'saliency.json')) as f:
      json.dump({'task': task, 'env_steps': run.env_steps, 'policy_scale': p_scale,
                 'value_scale': v_scale, 'frames': [f[3] for f in frames]}, f, indent=1)
    if _GIF.value:
      with atomic_write.atomic_path(os.path.join(output, 'saliency.gif')) as tmp:
        render.write_gif(tmp, images, fps=15.0)
  except OSError as e:
    raise SaliencyError(f'cannot write into {output}: {e.strerror or e}') from None
  print(f'wrote {len(images)} frames (steps {frames[0][3]["step"]}..{frames[-1][3]["step"]}) '
        f'to {output}')


if __name__ == '__main__':
  flags.mark_flag_as_required('workdir')
  cli.run(main)
