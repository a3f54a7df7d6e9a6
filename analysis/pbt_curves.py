"""A population's curves from its members' run folders (launch/pbt.py): each
member's training return and hyperparameter schedule against env steps, and
the copies between members. Pure functions over metrics rows."""

import os
from typing import Dict, List, Sequence, Tuple

from configs import pbt as pbt_lib
from rundir import run_folder

MEMBERS = 'members'
EVENTS = 'events.jsonl'


def load_population(population_dir: str) -> Tuple[Dict[str, List[Dict]], List[Dict]]:
  """({member name: its metrics.jsonl rows}, events.jsonl's rows or []) of a population folder;
  members without metrics.jsonl are left out. FileNotFoundError when the folder has no members/."""
  root = os.path.join(population_dir, MEMBERS)
  members = {name: run_folder.read_jsonl(run_folder.metrics_path(os.path.join(root, name)))
             for name in sorted(os.listdir(root))
             if os.path.isfile(run_folder.metrics_path(os.path.join(root, name)))}
  events_path = os.path.join(population_dir, EVENTS)
  events = run_folder.read_jsonl(events_path) if os.path.exists(events_path) else []
  return members, events


def rolling_return(rows: Sequence[Dict], task: str, episodes: int = 100
                   ) -> Tuple[List[int], List[float]]:
  """(env steps, mean return of the last `episodes` games) at every metrics row that ended games of
  the task, from the rows' per-window means and counts (configs.pbt.last_episodes_mean)."""
  steps, values, seen = [], [], []
  for row in rows:
    if int(row.get(f'episodes/{task}', 0)) <= 0:
      continue
    seen.append(row)
    steps.append(int(row['env_steps']))
    values.append(pbt_lib.last_episodes_mean(seen, task, episodes))
  return steps, values


def schedule(rows: Sequence[Dict], name: str) -> List[Tuple[int, int, float]]:
  """A member's (from env step, to env step, value) segments of one
  hyperparameter 'pbt/<name>', in order.

  A row holds the value trained with since the previous row; a copy's row
  ('pbt/copied_from', at the donor's step) starts the next segment there.
  """
  key = f'pbt/{name}'
  segments, start = [], 0
  for row in rows:
    if key not in row:
      continue
    step = int(row['env_steps'])
    if 'pbt/copied_from' in row:
      start = step
      continue
    if step > start:
      segments.append((start, step, float(row[key])))
    start = step
  return segments


def copies(events: Sequence[Dict], member: str) -> List[Dict]:
  return [e for e in events if e.get('recipient') == member]
