"""Ray Tune's files under a population's `ray/tune/`, as the project sees
them: whether the experiment state can restore the whole population, and
which of a member's Ray checkpoints still need their copy of its state.

Ray writes its experiment state in place, so a full disk or a kill can cut
it off; a copy names the donor's Ray checkpoint of the moment it was
decided, which Ray's own retention may delete before the recipient is
restored. Ray keeps every checkpoint folder here, and the members empty
those no copy or restore can need (`prune`).
"""

import datetime
import glob
import json
import os
import pickle
import shutil
from typing import Iterable, Optional

KEEP_NEWEST = 2


def unusable(path: str, population: int) -> Optional[str]:
  """Why the Ray Tune experiment at `path` cannot restore `population`
  members (missing, cut off, fewer trials), or None when it can."""
  if not os.path.exists(os.path.join(path, 'tuner.pkl')):
    return 'it is missing'
  states = sorted(glob.glob(os.path.join(path, 'experiment_state-*.json')))
  if not states:
    return 'it has no experiment state'
  try:
    with open(states[-1]) as f:
      trials = len(json.load(f)['trial_data'])
    for name in glob.glob(os.path.join(path, '*.pkl')):
      with open(name, 'rb') as f:
        pickle.load(f)
  except Exception as e:  # noqa: BLE001 -- a cut-off file fails in many ways
    return f'it is cut off ({type(e).__name__} reading it)'
  if trials != population:
    return f'it holds {trials} of the {population} members'
  return None


def set_aside(path: str) -> str:
  """Moves the experiment folder `path` to `<path>.lost-<time>`; returns the new path."""
  dest = f'{path}.lost-{datetime.datetime.now():%Y%m%d-%H%M%S}'
  os.replace(path, dest)
  return dest


def prune(trial_dir: str, needed_steps: Iterable[int]) -> None:
  """Empties the `state` folder of each of a trial's Ray checkpoints but the
  KEEP_NEWEST at the latest env steps and those at a step in `needed_steps`
  (named by a pending copy); the checkpoint folders and their member.json
  stay, so Ray can still restore from any (the member's folder has newer)."""
  found = []
  for state in glob.glob(os.path.join(trial_dir, 'checkpoint_*', 'state')):
    try:   # by env step: Ray reuses folder names after a resume
      with open(os.path.join(os.path.dirname(state), 'member.json')) as f:
        found.append((int(json.load(f)['env_steps']), state))
    except (OSError, ValueError, KeyError):
      continue
  needed = set(needed_steps)
  for step, state in sorted(found)[:-KEEP_NEWEST]:
    if step not in needed:
      shutil.rmtree(state, ignore_errors=True)
