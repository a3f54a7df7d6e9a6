"""A trained run's checkpoint evaluated: whole episodes per task, a table and
a JSON record in the run folder (`launch/evaluate.py` is the command line).

Writes <workdir>/eval/<env_steps>.json (settings, per-task statistics of
returns and lengths, human-normalised scores for Atari); an evaluation of a
step evaluated before goes to <env_steps>.2.json, .3.json, ... (the earlier
ones are kept) unless `overwrite`. With `video`, one GIF per task of its
first episode in <workdir>/eval/<env_steps>_video/.
"""

import json
import os

from analysis import evaluation
from analysis.run_loading import load_run
from envs import render


def run_evaluation(workdir, step=None, episodes=10, greedy=False, video=False,
                   max_video_frames=2000, max_steps=None, num_envs=8, seed=0, out=print,
                   uniform=False, overwrite=False):
  """Loads `workdir`'s checkpoint at env step `step` (default: the latest),
  plays `episodes` whole episodes of every task (`num_envs` at a time,
  sampled actions unless `greedy`; uniformly random ones with `uniform`),
  writes the JSON record (and GIFs) and returns it; progress lines go to
  `out`. Raises FileNotFoundError for a missing run or step,
  configs.validation.ConfigError for a config that no longer validates,
  agents.checkpoint.CheckpointError for a checkpoint that cannot be read."""
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
      path = os.path.join(video_dir, f'{result.name}.gif')
      render.write_gif(path, result.frames, result.video_fps)
      out(f'video: {path} ({len(result.frames)} frames)')
    result.frames = []  # GIF written: free the memory before the next task
    results.append(result)
  settings = {'episodes': episodes, 'greedy': greedy, 'uniform': uniform, 'step': step,
              'seed': seed,
              'max_steps': max_steps, 'num_envs': num_envs}
  record = evaluation.summary(run, results, settings)
  os.makedirs(eval_dir, exist_ok=True)
  path = evaluation.result_path(eval_dir, f'{run.env_steps}{"_uniform" if uniform else ""}',
                                overwrite)
  with open(path, 'w') as f:
    json.dump(record, f, indent=2)
  out(evaluation.format_table(record))
  out(f'written: {path}')
  return record
