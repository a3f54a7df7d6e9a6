"""How much of each task's policy-gradient credit the learner's advantage
normalisation keeps (`vtrace.normalize_advantages`, `normalize_advantages_per`).

Normalising within a minibatch centres a task with one unroll there on that
unroll's own mean, removing the credit of the unroll as a whole. Measured on
real batches against each task's advantages normalised over the whole batch.
Pure numpy; `update_diagnosis.Diagnoser.advantage_batches` collects the batches.
"""

from typing import Dict, List, NamedTuple, Sequence

import jax.numpy as jnp
import numpy as np

from rl import actor_critic as ac

REWARD_GROUPS = ('r>0', 'r<0', 'r=0')


class AdvantageBatch(NamedTuple):
  """One learner batch's advantages before normalisation.

  raw, mask, reward: [T, B] the PopArt-scaled advantages, valid-step mask and rewards.
  unroll_task: [B] each unroll's task.
  minibatches: [M, S] the unroll indices of each minibatch (rl/minibatches.unroll_order
    with the learner's key).
  """
  raw: np.ndarray
  mask: np.ndarray
  reward: np.ndarray
  unroll_task: np.ndarray
  minibatches: np.ndarray


def normalizations(b: AdvantageBatch, num_tasks: int) -> Dict[str, np.ndarray]:
  """The advantages three ways, each [T, B].

  'batch': per task over the whole batch (the reference); 'task': per task
  within each minibatch; 'minibatch': pooled within each minibatch (the
  default). Unrolls in no minibatch (the dropped remainder) stay 0 in the last two.
  """
  out = {name: np.zeros_like(b.raw) for name in ('batch', 'task', 'minibatch')}
  tasks = np.broadcast_to(b.unroll_task, b.raw.shape)
  # The learner's own functions (rl/actor_critic.py), on host arrays.
  per_task = lambda x, m, t: np.asarray(ac.normalize_per_task(
      jnp.asarray(x), jnp.asarray(m), jnp.asarray(t), num_tasks))
  out['batch'] = per_task(b.raw, b.mask, tasks)
  for cols in b.minibatches:
    out['task'][:, cols] = per_task(b.raw[:, cols], b.mask[:, cols], tasks[:, cols])
    out['minibatch'][:, cols] = np.asarray(ac.normalize(jnp.asarray(b.raw[:, cols]),
                                                        jnp.asarray(b.mask[:, cols])))
  return out


def variance_split(x, mask):
  """(between, within): the sum of squares of [T, U] x's valid entries about
  their mean, split into the per-unroll means' part and the rest."""
  n_u = mask.sum(0)
  count = n_u.sum()
  if count == 0:
    return 0.0, 0.0
  mean = (mask * x).sum() / count
  unroll_mean = (mask * x).sum(0) / np.maximum(n_u, 1)
  between = float((n_u * (unroll_mean - mean) ** 2).sum())
  within = float((mask * (x - unroll_mean) ** 2).sum())
  return between, within


def _pearson(x, y):
  x, y = x - x.mean(), y - y.mean()
  den = np.sqrt((x * x).sum() * (y * y).sum())
  return float((x * y).sum() / den) if den > 0 else float('nan')


def report(batches: Sequence[AdvantageBatch], num_tasks: int,
           names: Sequence[str] = ()) -> Dict:
  """The measurements over several batches.

  Returns:
    {'tasks': {name: {'steps', 'raw_std', 'between_share', 'corr_task',
    'corr_minibatch', 'credit': {group: {'unrolls', 'batch', 'task'}}}},
    'unrolls_per_minibatch': [count of (task, minibatch) pairs holding 0..S of
    the task's unrolls]}. 'between_share': `variance_split`'s between part of
    the raw advantages' total; 'corr_*': correlation with the 'batch' normalisation
    over the task's valid steps; a credit group's 'batch' / 'task': its unrolls'
    mean advantage in those units, unrolls grouped by the sign of their reward sum.
  """
  names = list(names) or [str(k) for k in range(num_tasks)]
  size = batches[0].minibatches.shape[1]
  counts = np.zeros(size + 1, int)
  between, within = np.zeros(num_tasks), np.zeros(num_tasks)
  values = {k: {'raw': [], 'batch': [], 'task': [], 'minibatch': []} for k in range(num_tasks)}
  credit = {k: {g: [] for g in REWARD_GROUPS} for k in range(num_tasks)}
  for b in batches:
    norms = normalizations(b, num_tasks)
    for cols in b.minibatches:
      for k in range(num_tasks):
        counts[int((b.unroll_task[cols] == k).sum())] += 1
    for k in range(num_tasks):
      cols = np.flatnonzero(b.unroll_task == k)
      m = b.mask[:, cols]
      btw, wth = variance_split(b.raw[:, cols], m)
      between[k] += btw
      within[k] += wth
      valid = m > 0
      for name in values[k]:
        source = b.raw if name == 'raw' else norms[name]
        values[k][name].append(source[:, cols][valid])
      for u in cols:
        mu = b.mask[:, u]
        if mu.sum() == 0:
          continue
        total = float((b.reward[:, u] * mu).sum())
        group = 'r>0' if total > 0 else ('r<0' if total < 0 else 'r=0')
        credit[k][group].append(((norms['batch'][:, u] * mu).sum() / mu.sum(),
                                 (norms['task'][:, u] * mu).sum() / mu.sum()))
  tasks = {}
  for k in range(num_tasks):
    raw, ref, per_task, pooled = (np.concatenate(values[k][n])
                                  for n in ('raw', 'batch', 'task', 'minibatch'))
    ss = between[k] + within[k]
    tasks[names[k]] = {
        'steps': int(ref.size),
        'raw_std': float(raw.std()),
        'between_share': between[k] / ss if ss > 0 else float('nan'),
        'corr_task': _pearson(per_task, ref),
        'corr_minibatch': _pearson(pooled, ref),
        'credit': {g: {'unrolls': len(c),
                       'batch': float(np.mean([x[0] for x in c])) if c else float('nan'),
                       'task': float(np.mean([x[1] for x in c])) if c else float('nan')}
                   for g, c in credit[k].items()}}
  return {'tasks': tasks, 'unrolls_per_minibatch': counts.tolist()}


def format_report(result: Dict) -> List[str]:
  """The report as text lines: one table row per task, then the counts."""
  lines = ['task            steps  raw std  between  corr task  corr minibatch  '
           'credit r>0 (batch / task units, unrolls)  r<0  r=0']
  for name, t in result['tasks'].items():
    credit = '  '.join(f"{c['batch']:+.2f} / {c['task']:+.2f} ({c['unrolls']})"
                       for c in t['credit'].values())
    lines.append(f"{name:14s} {t['steps']:6d}  {t['raw_std']:7.2f}  {t['between_share']:7.2f}  "
                 f"{t['corr_task']:9.3f}  {t['corr_minibatch']:14.3f}  {credit}")
  counts = result['unrolls_per_minibatch']
  total = max(sum(counts), 1)
  lines.append('unrolls of a task per minibatch: ' + ', '.join(
      f'{i}: {c} ({100 * c / total:.1f}%)' for i, c in enumerate(counts)))
  return lines
