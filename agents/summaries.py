"""A log step's metrics: the learner's update metrics averaged over the
window, every process's episodes (returns, lengths, the env's own stats),
human-normalised Atari scores, action statistics, throughput and timings.

Each process contributes a JSON-able window report (`Summariser.report`);
process 0 turns the gathered reports into one flat dict (`summarise`).
"""

import collections
from typing import Dict, List, Sequence

from absl import logging
import jax
import numpy as np

from agents.action_stats import ActionStats
from envs import atari
from rl import popart
from rl.task_metrics import TASK_COUNT


class Summariser:
  """Keeps what outlives a window: each task's latest return and
  human-normalised score (a sweep's target, the HNS summary), and the
  action statistics of the window in progress.

  Holds no lock: use it from the learner loop's thread.

  Args:
    plan: the RunPlan (task names and games, frames per step).
    popart_enabled: PopArt keeps one statistic per task; without it the
      single statistic is reported for every task.
    action_names: the names of the A actions.
    num_actions: A.
  """

  def __init__(self, plan, popart_enabled: bool, action_names: Sequence[str], num_actions: int):
    self._plan, self._popart = plan, popart_enabled
    self._action_names = action_names
    self.action_stats = ActionStats(plan.num_tasks, num_actions)
    self._latest_hns: Dict[str, float] = {}
    self._latest_returns: Dict[str, float] = {}

  def add_batch(self, unroll) -> None:
    """Adds the actions and behaviour logits of one learner batch.

    Args:
      unroll: the batch, an Unroll of host arrays.
    """
    self.action_stats.add(unroll.task_id, unroll.action, unroll.behaviour_logits)

  def report(self, episodes, lags: List[int], actor_env_steps: int, queue_size: int,
             restarts: int) -> Dict:
    """This process's side of a window, JSON-able. Resets the action window.

    Args:
      episodes: the rollout.Episodes that ended in the window.
      lags: each learner block's policy lag, in learner updates.
      actor_env_steps: env steps the actors took so far (a running total).
      queue_size: blocks waiting in the unroll queue now.
      restarts: env restarts so far.

    Returns:
      {'episodes': [[task_id, return, length, stats]], 'actions': the
      drained ActionStats window, 'lags', 'actor_env_steps', 'queue_size',
      'restarts'}.
    """
    return {'episodes': [[e.task_id, e.episode_return, e.episode_length, e.stats]
                         for e in episodes],
            'actions': self.action_stats.drain(), 'lags': [int(x) for x in lags],
            'actor_env_steps': int(actor_env_steps), 'queue_size': int(queue_size),
            'restarts': int(restarts)}

  def summarise(self, window: List[Dict], reports: List[Dict], env_steps: int,
                learner_steps: int, sps: float) -> Dict:
    """The log step's metrics. Resets the action window.

    Update metrics are averaged over the window's updates (those some
    updates lack, over the updates that have them); per-task metrics
    ('task/<m>' [K]) become '<m>/<task>'. PopArt's mu and sigma are the last
    update's, per task. Episode metrics are means per task over every
    process's episodes; 'mean_episode_return' and the HNS summary use each
    task's latest window with episodes. Collapsed tasks are logged as
    warnings.

    Args:
      window: the update metrics of the window's updates (device or host
        arrays).
      reports: every process's `report`, in process order.
      env_steps: the run's env step.
      learner_steps: the learner step.
      sps: env steps per second over the window.

    Returns:
      A flat dict {name: number}: 'env_steps', 'env_frames',
      'learner_steps', 'sps', 'policy_lag', 'policy_lag_max',
      'actor_env_steps', 'queue_size', per-process counts with several
      processes, the update metrics, 'popart/mu/<task>',
      'popart/sigma/<task>', 'popart/step/<task>' (each task's statistics
      step per update, the window's mean), 'kl_update_max' (the window's
      largest update KL), 'episode_return/<task>',
      'episode_length/<task>', 'episodes/<task>', the env's stats per task,
      'hns/<task>' for Atari games with reference scores, the action
      statistics (ActionStats.summary) and 'env/restarts'.
    """
    plan = self._plan
    host = jax.device_get(window)
    lags = [x for r in reports for x in r['lags']]
    out = {'env_steps': env_steps,
           'env_frames': env_steps * plan.frames_per_step,
           'learner_steps': int(learner_steps),
           'sps': float(sps),
           'policy_lag': float(np.mean(lags)) if lags else 0.0,
           'policy_lag_max': int(np.max(lags)) if lags else 0,
           'actor_env_steps': sum(r['actor_env_steps'] for r in reports),
           'queue_size': sum(r['queue_size'] for r in reports)}
    if len(reports) > 1:  # what each process contributes: a slow host shows here
      for p, r in enumerate(reports):
        out[f'process/{p}/actor_env_steps'] = r['actor_env_steps']
        out[f'process/{p}/episodes'] = len(r['episodes'])
    for key in dict.fromkeys(k for m in host for k in m):   # every key, in first-seen order
      if key.startswith('popart/') or key == TASK_COUNT:
        continue
      values = [m[key] for m in host if key in m]   # the task gradients: some updates only
      if key.startswith('task/'):   # [K]: one per task, as '<name>/<task>'
        mean = np.mean(values, axis=0)
        for i, name in enumerate(plan.task_names):
          out[f'{key[len("task/"):]}/{name}'] = float(mean[i])
        continue
      out[key] = float(np.mean(values))
    last = host[-1]
    for i, name in enumerate(plan.task_names):
      j = i if self._popart else 0
      out[f'popart/mu/{name}'] = float(last['popart/mu'][j])
      out[f'popart/sigma/{name}'] = float(last['popart/sigma'][j])
    steps = [m[popart.STEP_METRIC] for m in host if popart.STEP_METRIC in m]
    if steps:   # each task's statistics step per update, the window's mean
      mean_step = np.mean(steps, axis=0)
      for i, name in enumerate(plan.task_names):
        out[f'popart/step/{name}'] = float(mean_step[i])
    kls = [m['kl_update'] for m in host if 'kl_update' in m]
    if kls:   # a normaliser that jumps shows as one update's shock, not in the mean
      out['kl_update_max'] = float(np.max(kls))
    out.update(self._episode_metrics(reports))
    actions, collapsed = self.action_stats.summary(
        plan.task_names, self._action_names, [r['actions'] for r in reports])
    out.update(actions)
    for line in collapsed:
      logging.warning('%s', line)
    out['env/restarts'] = sum(r['restarts'] for r in reports)
    return out

  def _episode_metrics(self, reports: List[Dict]) -> Dict:
    plan, out = self._plan, {}
    episodes = collections.defaultdict(list)
    for r in reports:
      for task_id, episode_return, episode_length, stats in r['episodes']:
        episodes[task_id].append((episode_return, episode_length, stats))
    for task_id, eps in sorted(episodes.items()):
      name = plan.task_names[task_id]
      out[f'episode_return/{name}'] = float(np.mean([e[0] for e in eps]))
      out[f'episode_length/{name}'] = float(np.mean([e[1] for e in eps]))
      out[f'episodes/{name}'] = len(eps)
      for stat in (eps[0][2] or {}):  # e.g. NetHack's in-game score, depth, turns
        out[f'{stat}/{name}'] = float(np.nanmean([e[2][stat] for e in eps]))
      self._latest_returns[name] = out[f'episode_return/{name}']
      hns = atari.human_normalised(plan.task_games[task_id], out[f'episode_return/{name}'])
      if hns is not None:  # Atari games with reference scores
        out[f'hns/{name}'] = self._latest_hns[name] = hns
    if self._latest_returns:  # each task's latest window with episodes; a sweep's target
      out['mean_episode_return'] = float(np.mean(list(self._latest_returns.values())))
    if len(self._latest_hns) > 1:  # over each task's latest window with episodes
      for stat, value in atari.hns_summary(self._latest_hns).items():
        out[f'hns/{stat}'] = value
    return out
