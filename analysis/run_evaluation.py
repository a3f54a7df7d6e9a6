"""A trained run's checkpoint evaluated: whole episodes per task, a table and
a JSON record in the run folder (`launch/evaluate.py` is the command line).

Writes <workdir>/eval/<env_steps>.json (evaluation.summary); an evaluation of a step evaluated
before goes to <env_steps>.2.json, .3.json, ... (the earlier ones are kept) unless `overwrite`. With
`video`, one MP4 (or GIF) per task of its first episode in <workdir>/eval/<env_steps>_video/.
"""

import json
import os

from analysis import evaluation
from analysis.run_loading import load_run
from envs import render
from infra import atomic_write


def run_evaluation(workdir, step=None, episodes=10, greedy=False, video=False,
                   max_video_frames=2000, max_steps=None, num_envs=8, seed=0, out=print,
                   uniform=False, overwrite=False):
  """Evaluates a run's checkpoint on every task and writes the record
  (evaluation.summary) where the module docstring says; returns the record.

  Args:
    step: the checkpoint's env step; None: the latest intact one.
    episodes: whole episodes per task.
    greedy: act with the argmax of the logits (else sampled).
    max_steps, num_envs, seed: as evaluation.evaluate_task's.
    out: where progress lines and the table go.
    uniform: act uniformly at random (a baseline), recorded as <env_steps>_uniform.json.

  Raises:
    FileNotFoundError: for a missing run or step.
    configs.validation.ConfigError: for a config that no longer validates.
    agents.checkpoint.CheckpointError: for a checkpoint that cannot be read.
  """
  run = load_run(workdir, step)
  for bad_step, what in run.skipped:
    out(f'skipped the checkpoint at env step {bad_step:,}: damaged ({what})')
  out(f'loaded {workdir} at env step {run.env_steps:,}; playing {episodes} episodes '
      f'of each of {run.plan.num_tasks} task(s)')
  eval_dir = os.path.join(workdir, 'eval')
  video_dir = os.path.join(eval_dir, f'{run.env_steps}_video')
  if video:
    os.makedirs(video_dir, exist_ok=True)
  results = []
  for task_id in range(run.plan.num_tasks):
    result = evaluation.evaluate_task(
        run, task_id, episodes, greedy=greedy, uniform=uniform, seed=seed, video=video,
        max_video_frames=max_video_frames, max_steps=max_steps, num_envs=num_envs)
    if result.frames:
      path = _write_video(os.path.join(video_dir, result.name), result.frames, result.video_fps)
      note = '' if path.endswith('.mp4') else '; a GIF: no MP4 writer, imageio-ffmpeg'
      out(f'video: {path} ({len(result.frames)} frames{note})')
    result.frames = []  # video written: free the memory before the next task
    results.append(result)
  settings = {'episodes': episodes, 'greedy': greedy, 'uniform': uniform, 'step': step,
              'seed': seed,
              'max_steps': max_steps, 'num_envs': num_envs}
  record = evaluation.summary(run, results, settings)
  os.makedirs(eval_dir, exist_ok=True)
  path = evaluation.result_path(eval_dir, f'{run.env_steps}{"_uniform" if uniform else ""}',
                                overwrite)
  with atomic_write.atomic_open(path) as f:   # a full disk leaves no empty file
    json.dump(record, f, indent=2)
  out(evaluation.format_table(record))
  out(f'written: {path}')
  return record


def _write_video(stem, frames, fps):
  """Writes `frames` to <stem>.mp4 (render.write_mp4), or to <stem>.gif when no MP4 writer is
  installed (render.mp4_writer_available), whole or not at all; returns the path written."""
  mp4 = render.mp4_writer_available()
  path = f'{stem}.{"mp4" if mp4 else "gif"}'
  with atomic_write.atomic_path(path) as tmp:
    (render.write_mp4 if mp4 else render.write_gif)(tmp, frames, fps)
  return path
