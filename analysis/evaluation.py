"""Evaluating a loaded policy: exactly N whole episodes per task, and their statistics.

Atari plays whole games under IMPALA's evaluation protocol (no end-of-life episodes; Espeholt et al.
2018, arXiv 1802.01561; Machado et al. 2018, arXiv 1709.06009). Returns are the env's raw rewards
(the game score); the policy's prev_reward input is scaled as in training. Side effects are the envs
only; launch/evaluate.py writes the results.
"""

import dataclasses
import os
from typing import Any, Callable, Dict, List, Optional, Sequence

import jax
import numpy as np

from agents.actor import make_act_fn
from agents.rollout import Episode, StepBookkeeping, host_dtype
from analysis.run_loading import LoadedRun
from envs import atari
from envs import registry
from envs import render

DEFAULT_NUM_ENVS = 8       # envs per task stepped together
STATS = ('mean', 'sem', 'median', 'std', 'min', 'max')


def episode_quotas(num_episodes: int, num_envs: int) -> np.ndarray:
  """How many episodes each env plays, exactly `num_episodes` in all: int64 [num_envs],
  num_episodes // num_envs each, one more for the first num_episodes % num_envs. Each env counts
  its own first k episodes: counting whichever end first would favour short episodes."""
  return np.array([num_episodes // num_envs + (i < num_episodes % num_envs)
                   for i in range(num_envs)], np.int64)


def summarise(values: Sequence[float]) -> Dict[str, Optional[float]]:
  """STATS of the values as floats, all None for no values. sem is the mean's standard error,
  std(ddof=1) / sqrt(n), None for one value; std is the population std (ddof 0)."""
  v = np.asarray(values, np.float64)
  if not v.size:
    return {k: None for k in STATS}
  sem = float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else None
  return {'mean': float(v.mean()), 'sem': sem, 'median': float(np.median(v)),
          'std': float(v.std()), 'min': float(v.min()), 'max': float(v.max())}


def make_policy(network, greedy: bool, uniform: bool = False) -> Callable:
  """policy(variables, obs, first, core_state, rng) -> (action int32 [B], core_state, rng) for
  evaluation: the actors' own jitted step (actor.make_act_fn), argmax of the logits when `greedy`,
  uniformly random actions (no network call) when `uniform`."""
  act = make_act_fn(network)  # the actors' own jitted step: the same network call

  def policy(variables, obs, first, core_state, rng):
    if uniform:  # no network call at all
      rng, key = jax.random.split(rng)
      return (np.asarray(jax.random.randint(key, first.shape, 0, network.num_actions), np.int32),
              core_state, rng)
    action, logits, core_state, rng = act(variables, obs, first, core_state, rng)
    action = np.argmax(np.asarray(logits), axis=-1) if greedy else np.asarray(action)
    return action.astype(np.int32), core_state, rng

  return policy


@dataclasses.dataclass
class TaskEvaluation:
  """One task's evaluation: its episodes, whether all ended, and env 0's video frames."""
  name: str
  episodes: List[Episode]   # exactly the number asked for, unless stopped by max_steps
  complete: bool            # False: max_steps ended the task before its episodes did
  steps: int                # batched env steps taken
  frames: List[render.Frame] = dataclasses.field(default_factory=list)  # env 0's first episode
  video_fps: float = 0.0


def play_episodes(env, policy: Callable, variables, initial_state, num_episodes: int,
                  rng: jax.Array, obs_keys: Sequence[str], prev_reward_scale: float = 1.0,
                  frame_fn: Optional[Callable] = None, max_video_frames: int = 0,
                  max_steps: Optional[int] = None, observe: Optional[Callable] = None):
  """Plays until every env has ended its quota of episodes (episode_quotas), with the actors' step
  bookkeeping (agents/rollout.py): prev_reward times `prev_reward_scale`, as training fed it.

  Args:
    env: a batched env (rewards unscaled).
    policy: `make_policy`'s policy.
    frame_fn: draws env 0 from a StepResult; its first episode is recorded, at most
      `max_video_frames` frames; None: no video.
    max_steps: stop after this many batched steps; None: no cap.
    observe: `observe(step, obs, first, core_state, result)` sees each step's policy inputs before
      the policy acts; None: nothing.

  Returns:
    (episodes, complete, steps, frames): the agents.rollout.Episodes in the order they ended; False
    when max_steps came first; the batched steps taken; env 0's first episode's frames.
  """
  n = env.num_envs
  quota = episode_quotas(num_episodes, n)
  ended = np.zeros(n, np.int64)            # episodes each env has counted
  result = env.reset()
  book = StepBookkeeping(n, prev_reward_scale)
  state, episodes, steps = initial_state, [], 0
  frames = [frame_fn(result)] if frame_fn and max_video_frames else []
  recording = 0 < len(frames) < max_video_frames
  while (ended < quota).any():
    if max_steps is not None and steps >= max_steps:
      return episodes, False, steps, frames
    obs = {k: np.asarray(result.obs[k], host_dtype(result.obs[k].dtype)) for k in obs_keys}
    obs.update(book.policy_inputs(result.task_id))
    first = book.first
    if observe is not None:
      observe(steps, obs, first, state, result)
    action, state, rng = policy(variables, obs, first, state, rng)
    result = env.step(action)
    steps += 1
    live0 = not book.terminal[0]  # env 0's step is not a reset step
    for i, episode in book.record(action, result):
      if ended[i] < quota[i]:
        episodes.append(episode)
        ended[i] += 1
    if recording and live0:
      frames.append(frame_fn(result))
      recording = not result.game_ended[0] and len(frames) < max_video_frames
  return episodes, True, steps, frames


def env_seed(seed: int, task_id: int) -> int:
  """The first env seed of a task's evaluation: apart from training's, the same for every policy
  evaluated with the same --seed (launch/evaluate_peer.py plays these games too)."""
  return seed * 7_919 + 1_000 * task_id


def make_task_env(run: LoadedRun, task_id: int, num_envs: int, seed: int, video: bool):
  """Its family's EnvFamily.evaluation_env of one task, with the task's evaluation kwargs
  (task_env_kwargs with training=False): (env, frame_fn or None, video fps)."""
  task = run.spec.run.tasks[task_id]
  kwargs = registry.task_env_kwargs(task, run.plan.num_tasks, run.spec.envs, training=False)
  family = registry.family_of(task['env_id'])
  context = registry.batch_context(family, run.plan.actors.resources, run.spec.envs,
                                   run.plan.observation_keys)
  return family.evaluation_env(task['env_id'], task_id, kwargs, num_envs, seed, video, context)


def reward_scale(run: LoadedRun, task_id: int) -> float:
  """The task's training reward scale (1.0 if the config sets none), for the prev_reward input."""
  scales = tuple(run.spec.run.reward_scales) or (1.0,) * run.plan.num_tasks
  return float(scales[task_id])


def play_one_episode(run: LoadedRun, task_id: int, observe: Callable, max_steps: int,
                     seed: int = 0, greedy: bool = False) -> Optional[Episode]:
  """Plays an episode of a task in one env: its rollout.Episode, or None if max_steps came first.

  Args:
    observe: `observe(step, obs, first, core_state, frame)` with each step's policy inputs and video
      frame (make_task_env), before the policy acts.
  """
  env, frame_fn, _ = make_task_env(run, task_id, 1, seed=seed, video=True)
  try:
    episodes, _, _, _ = play_episodes(
        env, make_policy(run.network, greedy), run.variables, run.network.initial_state(1), 1,
        jax.random.key(seed), obs_keys=tuple(run.observation_spec),
        prev_reward_scale=reward_scale(run, task_id), max_steps=max_steps,
        observe=lambda step, obs, first, state, result: observe(
            step, obs, first, state, frame_fn(result)))
  finally:
    env.close()
  return episodes[0] if episodes else None


def evaluate_task(run: LoadedRun, task_id: int, num_episodes: int, greedy: bool = False,
                  uniform: bool = False, seed: int = 0, video: bool = False, max_video_frames: int = 2000,
                  max_steps: Optional[int] = None,
                  num_envs: int = DEFAULT_NUM_ENVS) -> TaskEvaluation:
  """Plays `num_episodes` whole episodes of a task with the run's policy, on at most `num_envs` envs
  seeded env_seed(seed, task_id). `max_steps` (a safety net for smoke tests) stops after that many
  batched steps, keeping only the episodes that ended. ValueError when num_episodes < 1."""
  if num_episodes < 1:
    raise ValueError(f'num_episodes must be >= 1, got {num_episodes}')
  n = min(num_episodes, num_envs)
  env, frame_fn, fps = make_task_env(run, task_id, n, seed=env_seed(seed, task_id), video=video)
  try:
    episodes, complete, steps, frames = play_episodes(
        env, make_policy(run.network, greedy, uniform), run.variables, run.network.initial_state(n),
        num_episodes, jax.random.fold_in(jax.random.key(seed), task_id),
        obs_keys=tuple(run.observation_spec), prev_reward_scale=reward_scale(run, task_id),
        frame_fn=frame_fn, max_video_frames=max_video_frames, max_steps=max_steps)
  finally:
    env.close()
  return TaskEvaluation(run.plan.task_names[task_id], episodes, complete, steps,
                        frames, fps if video else 0.0)


def evaluate(run: LoadedRun, num_episodes: int, **kwargs) -> List[TaskEvaluation]:
  """One TaskEvaluation per task, in task order (kwargs as for `evaluate_task`)."""
  return [evaluate_task(run, i, num_episodes, **kwargs) for i in range(run.plan.num_tasks)]


def summary(run: LoadedRun, results: Sequence[TaskEvaluation],
            settings: Dict[str, Any]) -> Dict[str, Any]:
  """The JSON-ready record of an evaluation: per task its episodes' statistics (`summarise`), plus
  'hns' (atari.hns_summary) when an Atari game has episodes."""
  tasks, hns = {}, {}
  for task_id, r in enumerate(results):
    returns = [e.episode_return for e in r.episodes]
    lengths = [e.episode_length for e in r.episodes]
    points = [e.points for e in r.episodes]
    entry = {'episodes': len(r.episodes), 'complete': r.complete, 'env_steps': r.steps,
             'return': summarise(returns), 'length': summarise(lengths),
             'points': summarise(points), 'reward_per_point': reward_per_point(r.episodes),
             'returns': returns, 'lengths': lengths}
    stat_names = sorted({k for e in r.episodes for k in (e.stats or {})})
    if stat_names:  # NetHack: in-game score, deepest level, turns
      entry['stats'] = {k: summarise([e.stats[k] for e in r.episodes]) for k in stat_names}
    score = run.plan.normalised_score(task_id, entry['return']['mean']) if returns else None
    if score is not None:
      entry['hns'] = hns[r.name] = score
    tasks[r.name] = entry
  out = {'workdir': run.workdir, 'env_steps': run.env_steps,
         'env_frames': run.env_steps * run.plan.frames_per_step,
         'settings': dict(settings), 'tasks': tasks}
  if hns:
    out['hns'] = atari.hns_summary(hns)
  return out


def result_path(eval_dir: str, stem: str, overwrite: bool = False) -> str:
  """<eval_dir>/<stem>.json, or the first free <stem>.<n>.json (n >= 2) when it
  exists and not `overwrite`: no evaluation replaces another unasked."""
  path = os.path.join(eval_dir, f'{stem}.json')
  n = 1
  while not overwrite and os.path.exists(path):
    n += 1
    path = os.path.join(eval_dir, f'{stem}.{n}.json')
  return path


def reward_per_point(episodes: Sequence[Episode]) -> Optional[float]:
  """The episodes' summed abs_reward over their rewarded steps (a game's reward
  scale: 1 for Pong, tens for Carnival); None when no step was rewarded."""
  points = sum(e.points for e in episodes)
  return sum(e.abs_reward for e in episodes) / points if points else None


def _fmt(value) -> str:
  return '-' if value is None else f'{value:.4g}'


def format_table(record: Dict[str, Any]) -> str:
  """A `summary` record as text: header, a row per task, the HNS median and mean when present."""
  s = record['settings']
  actions = ('uniformly random' if s.get('uniform') else
             'greedy' if s['greedy'] else 'sampled')
  steps = record['env_steps']
  lines = [f'{record["workdir"]} at env step {"(unknown)" if steps is None else f"{steps:,}"}: '
           + f'{s["episodes"]} episodes per task, {actions} actions']
  header = ['task', 'episodes', 'return mean', '+- s.e.', 'std', 'median', 'min', 'max',
            'length mean', 'points', 'reward/point', 'hns']
  rows = [header]
  for name, t in record['tasks'].items():
    ret = t['return']
    rows.append([name, f'{t["episodes"]}' + ('' if t['complete'] else ' (max_steps)'),
                 _fmt(ret['mean']), _fmt(ret.get('sem')), _fmt(ret['std']), _fmt(ret['median']),
                 _fmt(ret['min']), _fmt(ret['max']), _fmt(t['length']['mean']),
                 _fmt(t.get('points', {}).get('mean')), _fmt(t.get('reward_per_point')),
                 _fmt(t.get('hns'))])
  widths = [max(len(row[j]) for row in rows) for j in range(len(header))]
  for row in rows:
    lines.append('  '.join(c.ljust(w) if j == 0 else c.rjust(w)
                           for j, (c, w) in enumerate(zip(row, widths))))
  if record.get('hns'):
    lines.append(f'human-normalised score over the games: median {record["hns"]["median"]:.4g}, '
                 f'mean {record["hns"]["mean"]:.4g}')
  return '\n'.join(lines)
