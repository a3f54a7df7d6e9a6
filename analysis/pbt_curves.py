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
  """Reads a population folder's members' metrics and its copies.

  Args:
    population_dir: the population folder (rundir/population.py).

  Returns:
    ({member name: its metrics.jsonl rows}, the rows of events.jsonl, []
    without one); members without metrics.jsonl are left out.

  Raises:
    FileNotFoundError: when the folder has no members/.
  """
  root = os.path.join(population_dir, MEMBERS)
  members = {name: run_folder.read_jsonl(run_folder.metrics_path(os.path.join(root, name)))
             for name in sorted(os.listdir(root))
             if os.path.isfile(run_folder.metrics_path(os.path.join(root, name)))}
  events_path = os.path.join(population_dir, EVENTS)
  events = run_folder.read_jsonl(events_path) if os.path.exists(events_path) else []
  return members, events


def rolling_return(rows: Sequence[Dict], task: str, episodes: int = 100
                   ) -> Tuple[List[int], List[float]]:
  """A member's rolling mean training return.

  Args:
    rows: the member's metrics rows.
    task: the task name.
    episodes: the number of last games averaged.

  Returns:
    (env steps, mean return of the last `episodes` games) at every log row
    that ended games of the task ('episodes/<task>' > 0), from the rows'
    per-window means and counts (configs.pbt.last_episodes_mean).
  """
  steps, values, seen = [], [], []
  for row in rows:
    if int(row.get(f'episodes/{task}', 0)) <= 0:
      continue
    seen.append(row)
    steps.append(int(row['env_steps']))
    values.append(pbt_lib.last_episodes_mean(seen, task, episodes))
  return steps, values


def schedule(rows: Sequence[Dict], name: str) -> List[Tuple[int, int, float]]:
  """A member's schedule of one hyperparameter, as segments of env steps.

  Each interval's 'pbt/<name>' row (at its end) holds the value it trained
  with since the previous row; a copy's row (with 'pbt/copied_from', at the
  donor's step) starts the next interval there.

  Args:
    rows: the member's metrics rows.
    name: the hyperparameter, as in 'pbt/<name>'.

  Returns:
    (from env step, to env step, value) segments, in order.
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
  """The copies a member made (it was the recipient), in order.

  Args:
    events: the rows of events.jsonl.
    member: the member's name.

  Returns:
    The events whose recipient is `member`.
  """
  return [e for e in events if e.get('recipient') == member]


def final_return(rows: Sequence[Dict], task: str, episodes: int = 100) -> Optional[float]:
  """The last value of `rolling_return(rows, task, episodes)`; None when no game ended."""
  _, values = rolling_return(rows, task, episodes)
  return values[-1] if values else None
