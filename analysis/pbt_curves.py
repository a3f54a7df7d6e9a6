"""A population's curves from its members' run folders (launch/pbt.py):
each member's training return and hyperparameter schedule against env
steps, and the copies between members. Pure functions over metrics rows;
launch/plot_pbt.py draws them."""

import os
from typing import Dict, List, Optional, Sequence, Tuple

from configs import pbt as pbt_lib
from rundir import run_folder

MEMBERS = 'members'
EVENTS = 'events.jsonl'


def load_population(population_dir: str) -> Tuple[Dict[str, List[Dict]], List[Dict]]:
  """({member: its metrics rows}, the copies in events.jsonl)."""
  root = os.path.join(population_dir, MEMBERS)
  members = {name: run_folder.read_jsonl(run_folder.metrics_path(os.path.join(root, name)))
             for name in sorted(os.listdir(root))
             if os.path.isfile(run_folder.metrics_path(os.path.join(root, name)))}
  events_path = os.path.join(population_dir, EVENTS)
  events = run_folder.read_jsonl(events_path) if os.path.exists(events_path) else []
  return members, events


def rolling_return(rows: Sequence[Dict], task: str, episodes: int = 100
                   ) -> Tuple[List[int], List[float]]:
  """(env steps, mean return of the last `episodes` games) at every log row
  that ended games, from the rows' per-window means and counts."""
  steps, values, seen = [], [], []
  for row in rows:
    if int(row.get(f'episodes/{task}', 0)) <= 0:
      continue
    seen.append(row)
    steps.append(int(row['env_steps']))
    values.append(pbt_lib.last_episodes_mean(seen, task, episodes))
  return steps, values


def schedule(rows: Sequence[Dict], name: str) -> List[Tuple[int, int, float]]:
  """(from env step, to env step, value) of hyperparameter `name`, from the
  member's 'pbt/<name>' rows: each interval's row (at its end) holds the
  value it trained with since the previous row; a copy's row (with
  'pbt/copied_from', at the donor's step) starts the next interval there."""
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
  """The copies `member` made (it was the recipient), in order."""
  return [e for e in events if e.get('recipient') == member]


def final_return(rows: Sequence[Dict], task: str, episodes: int = 100) -> Optional[float]:
  _, values = rolling_return(rows, task, episodes)
  return values[-1] if values else None
