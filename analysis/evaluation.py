"""Evaluating a loaded policy: exactly N whole episodes per task, and their statistics.

Each task plays in its own batch of envs (up to `num_envs` in parallel),
with the policy sampled (the default) or greedy (argmax). Atari tasks play
whole games under IMPALA's evaluation protocol (`protocol_kwargs(...,
training=False)`: no end-of-life episodes; Espeholt et al. 2018, arXiv
1802.01561; Machado et al. 2018, arXiv 1709.06009, for whole games as the
unit of evaluation); NLE tasks play as configured,
except that a task that trained one role on random characters ('@') plays
that role here, so every task gets its own N episodes.

Returns are sums of the env's raw rewards (the game score; no reward scale,
no clipping). The policy sees what it saw in training: `prev_reward` is the
reward after the task's reward scale, as the actor feeds it.

Side effects are the envs only; writing results and videos is
launch/evaluate.py's job (`result_path` names its files).
"""

import dataclasses
import os
from typing import Any, Callable, Dict, List, Optional, Sequence

import jax
import numpy as np

from agents.actor import make_act_fn
from agents.rollout import Episode, StepBookkeeping, host_dtype
from analysis.run_loading import LoadedRun
from configs import validation
from envs import atari
from envs import registry
from envs import render

DEFAULT_NUM_ENVS = 8       # envs per task stepped together
STATS = ('mean', 'sem', 'median', 'std', 'min', 'max')


def episode_quotas(num_episodes: int, num_envs: int) -> np.ndarray:
  """How many episodes each env plays: exactly `num_episodes` in all.

  Each env counts its own first k episodes. Counting whichever episodes end
  first over all envs would favour short ones (a long episode would still be
  running when the count is reached).

  Args:
    num_episodes: the episodes wanted in all.
    num_envs: the envs playing them.

  Returns:
    int64 [num_envs]: num_episodes // num_envs each, one more for the first
    num_episodes % num_envs envs.
  """
  return np.array([num_episodes // num_envs + (i < num_episodes % num_envs)
                   for i in range(num_envs)], np.int64)


def summarise(values: Sequence[float]) -> Dict[str, Optional[float]]:
  """Summary statistics of a list of values.

  Args:
    values: the values (episode returns, lengths, ...).

  Returns:
    {'mean', 'sem', 'median', 'std', 'min', 'max'} (STATS) as floats: sem is
    the mean's standard error, sample std (ddof 1) / sqrt(n), None for one
    value; std is the population std (ddof 0). Every entry is None for no
    values.
  """
  v = np.asarray(values, np.float64)
  if not v.size:
    return {k: None for k in STATS}
  sem = float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else None
  return {'mean': float(v.mean()), 'sem': sem, 'median': float(np.median(v)),
          'std': float(v.std()), 'min': float(v.min()), 'max': float(v.max())}


def make_policy(network, greedy: bool, uniform: bool = False) -> Callable:
  """The evaluation policy: the actors' own jitted step (actor.make_act_fn).

  Args:
    network: the AgentNetwork.
    greedy: act with the argmax of the logits instead of a sample.
    uniform: ignore the network and act uniformly at random (a baseline).

  Returns:
    policy(variables, obs, first, core_state, rng) -> (action, core_state,
    rng), action a numpy int32 [B].
  """
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
  """Plays until every env has ended its quota of episodes.

  The step bookkeeping is the actors' own (agents/rollout.py): reset steps,
  `first` flags for the recurrent core, prev_action / prev_reward (the
  reward times `prev_reward_scale`, as training fed it).
  `frame_fn(result)`, if given, draws env 0; its first episode is recorded,
  at most `max_video_frames` frames. `observe(step, obs, first, core_state,
  result)`, if given, sees every step's policy inputs (and the StepResult they
  came from) before the policy acts: how inspection and saliency tools look
  inside an episode.

  Args:
    env: a batched env (rewards unscaled).
    policy: `make_policy`'s policy.
    variables: the network's variables.
    initial_state: the core state for the env's B envs.
    num_episodes: the episodes to play in all (episode_quotas).
    rng: the PRNG key of the action sampling.
    obs_keys: the observation keys the network reads.
    prev_reward_scale: the task's training reward scale.
    frame_fn: draws env 0 from a StepResult; None: no video.
    max_video_frames: the most frames recorded (0: none).
    max_steps: stop after this many batched steps; None: no cap.
    observe: called as `observe(step, obs, first, core_state, result)`
      before every policy step; None: nothing.

  Returns:
    (episodes, complete, steps, frames): the agents.rollout.Episodes counted,
    in the order they ended; False when max_steps came first; the batched
    steps taken; env 0's first episode's frames (from its first
    observation).
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
  """The first env seed of a task's evaluation.

  Seeds of their own, apart from training's (evaluation plays new games),
  the same for every policy evaluated with the same --seed
  (launch/evaluate_peer.py plays these games too).

  Args:
    seed: the evaluation's --seed.
    task_id: the task.

  Returns:
    seed * 7919 + 1000 * task_id.
  """
  return seed * 7_919 + 1_000 * task_id


def make_task_env(run: LoadedRun, task_id: int, num_envs: int, seed: int, video: bool):
  """An evaluation env for one task of a loaded run, rewards unscaled.

  The task's kwargs are its evaluation kwargs (task_env_kwargs with
  training=False); NLE tasks get the run's nle_workers (at least 1).

  Args:
    run: the loaded run.
    task_id: the task.
    num_envs: the envs to play in parallel.
    seed: the env seed.
    video: whether env 0 is drawn.

  Returns:
    (env, frame_fn or None, video fps): `frame_fn(result)` draws env 0, an
    RGB screen (EnvPool, synthetic) or a TtyFrame (NLE).
  """
  task = run.config.tasks[task_id]
  kwargs = validation.task_env_kwargs(run.config, task, run.plan.num_tasks, training=False)
  workers = run.plan.actors.nle_workers or 1
  return registry.evaluation_env(task['env_id'], task_id, kwargs, num_envs, seed, video,
                                 tuple(run.plan.observation_keys), workers)


def reward_scale(run: LoadedRun, task_id: int) -> float:
  """The task's training reward scale.

  Evaluation envs give raw scores, and the policy's prev_reward input must
  be scaled as it was in training.

  Args:
    run: the loaded run.
    task_id: the task.

  Returns:
    config.reward_scales[task_id], or 1.0 when the config sets none.
  """
  scales = tuple(run.config.reward_scales) or (1.0,) * run.plan.num_tasks
  return float(scales[task_id])


def play_one_episode(run: LoadedRun, task_id: int, observe: Callable, max_steps: int,
                     seed: int = 0, greedy: bool = False) -> Optional[Episode]:
  """Plays one episode of a task in one env, showing every step to `observe`.

  Args:
    run: the loaded run.
    task_id: the task.
    observe: called as `observe(step, obs, first, core_state, frame)` with
      every step's policy inputs and the frame a video would show
      (make_task_env) before the policy acts.
    max_steps: the most steps played.
    seed: the env seed and the sampling key's.
    greedy: act greedily (argmax).

  Returns:
    The agents.rollout.Episode, or None when max_steps came first.
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
  """Plays `num_episodes` whole episodes of task `task_id` with the run's policy.

  `max_steps` (None: no cap) stops the task after that many batched steps,
  keeping only the episodes that ended; a safety net for smoke tests. The
  envs are seeded env_seed(seed, task_id) and closed after.

  Args:
    run: the loaded run.
    task_id: the task.
    num_episodes: the episodes to play, >= 1.
    greedy: act with the argmax of the logits.
    uniform: act uniformly at random.
    seed: the evaluation seed.
    video: record env 0's first episode.
    max_video_frames: the most frames recorded.
    max_steps: the most batched steps; None: no cap.
    num_envs: the most envs played in parallel (at most num_episodes are).

  Returns:
    A TaskEvaluation; video_fps is 0 without video.

  Raises:
    ValueError: when num_episodes < 1.
  """
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
  """Evaluates every task in turn.

  Args:
    run: the loaded run.
    num_episodes: the episodes per task.
    **kwargs: as for `evaluate_task`.

  Returns:
    One TaskEvaluation per task, in task order.
  """
  return [evaluate_task(run, i, num_episodes, **kwargs) for i in range(run.plan.num_tasks)]


def summary(run: LoadedRun, results: Sequence[TaskEvaluation],
            settings: Dict[str, Any]) -> Dict[str, Any]:
  """The JSON-ready record of an evaluation.

  Args:
    run: the loaded run.
    results: its TaskEvaluations, in task order.
    settings: the evaluation's settings (episodes, greedy, uniform, ...).

  Returns:
    {'workdir', 'env_steps', 'env_frames', 'settings', 'tasks'} and, when a
    task is an Atari game with episodes, 'hns' (atari.hns_summary). Each
    task's entry holds 'episodes', 'complete', 'env_steps' (batched steps),
    'return', 'length' and 'points' (summarise), 'reward_per_point', the
    raw 'returns' and 'lengths', 'stats' (summarise of each episode
    statistic, NetHack's score, depth and turns) where there are any, and
    'hns' (of the mean return) for Atari games.
  """
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
    game = run.plan.task_games[task_id]
    if game and returns:
      entry['hns'] = hns[r.name] = atari.human_normalised(game, entry['return']['mean'])
    tasks[r.name] = entry
  out = {'workdir': run.workdir, 'env_steps': run.env_steps,
         'env_frames': run.env_steps * run.plan.frames_per_step,
         'settings': dict(settings), 'tasks': tasks}
  if hns:
    out['hns'] = atari.hns_summary(hns)
  return out


def result_path(eval_dir: str, stem: str, overwrite: bool = False) -> str:
  """Where an evaluation's record goes: no evaluation replaces another unasked.

  Args:
    eval_dir: the run's eval/ folder.
    stem: the file name without '.json'.
    overwrite: return <stem>.json even when it exists.

  Returns:
    <eval_dir>/<stem>.json, or the first free <stem>.<n>.json (n >= 2) when
    it exists and `overwrite` is off.
  """
  path = os.path.join(eval_dir, f'{stem}.json')
  n = 1
  while not overwrite and os.path.exists(path):
    n += 1
    path = os.path.join(eval_dir, f'{stem}.{n}.json')
  return path


def reward_per_point(episodes: Sequence[Episode]) -> Optional[float]:
  """The mean magnitude of the non-zero rewards over all the episodes' steps.

  A game's reward scale: 1 for Pong, tens for Carnival.

  Args:
    episodes: agents.rollout.Episodes.

  Returns:
    Their summed abs_reward over their summed points (rewarded steps); None
    when no step was rewarded.
  """
  points = sum(e.points for e in episodes)
  return sum(e.abs_reward for e in episodes) / points if points else None


def _fmt(value) -> str:
  return '-' if value is None else f'{value:.4g}'


def format_table(record: Dict[str, Any]) -> str:
  """A readable table of a `summary` record.

  Args:
    record: `summary`'s record (or one read back from eval/*.json).

  Returns:
    Text: a header line (workdir, env step, episodes per task, the kind of
    actions), one row per task, and the HNS median and mean when present.
  """
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
