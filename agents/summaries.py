"""A log step's metrics: update metrics averaged over the window, every process's episodes,
human-normalised Atari scores, action statistics, throughput and timings. Each process's
`Summariser.report` is gathered and process 0 `summarise`s them into one flat dict."""

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
  """Keeps what outlives a window: each task's latest return and HNS (a sweep's
  target) and the action statistics of the window in progress.

  Holds no lock: use it from the learner loop's thread. Without
  `popart_enabled` the single PopArt statistic is reported for every task.
  """

  def __init__(self, plan, popart_enabled: bool, action_names: Sequence[str], num_actions: int):
    self._plan, self._popart = plan, popart_enabled
    self._action_names = action_names
    self.action_stats = ActionStats(plan.num_tasks, num_actions)
    self._latest_hns: Dict[str, float] = {}
    self._latest_returns: Dict[str, float] = {}

  def add_batch(self, unroll) -> None:
    """Adds the actions and behaviour logits of one learner batch (host arrays)."""
    self.action_stats.add(unroll.task_id, unroll.action, unroll.behaviour_logits)

  def report(self, episodes, lags: List[int], actor_env_steps: int, queue_size: int,
             restarts: int) -> Dict:
    """This process's side of a window, JSON-able; resets the action window.

    Args:
      lags: each learner block's policy lag, in learner updates.
      actor_env_steps: env steps the actors took so far (a running total).
      queue_size: blocks waiting in the unroll queue now.
    """
    return {'episodes': [[e.task_id, e.episode_return, e.episode_length, e.stats]
                         for e in episodes],
            'actions': self.action_stats.drain(), 'lags': [int(x) for x in lags],
            'actor_env_steps': int(actor_env_steps), 'queue_size': int(queue_size),
            'restarts': int(restarts)}

  def summarise(self, window: List[Dict], reports: List[Dict], env_steps: int,
                learner_steps: int, sps: float) -> Dict:
    """The log step's metrics, a flat {name: number}; resets the action window.

    Update metrics are averaged over the updates that have them; per-task ones ('task/<m>' [K])
    become '<m>/<task>'; PopArt's mu and sigma are the last update's. Episode metrics are means per
    task over every process's episodes; 'mean_episode_return' and the HNS summary use each task's
    latest window with episodes.

    Args:
      reports: every process's `report`, in process order.
      sps: env steps per second over the window.
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
      hns = plan.normalised_score(task_id, out[f'episode_return/{name}'])
      if hns is not None:  # Atari games with reference scores
        out[f'hns/{name}'] = self._latest_hns[name] = hns
    if self._latest_returns:  # each task's latest window with episodes; a sweep's target
      out['mean_episode_return'] = float(np.mean(list(self._latest_returns.values())))
    if len(self._latest_hns) > 1:  # over each task's latest window with episodes
      for stat, value in atari.hns_summary(self._latest_hns).items():
        out[f'hns/{stat}'] = value
    return out
