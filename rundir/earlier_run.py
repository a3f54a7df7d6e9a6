"""An earlier run's files in a folder that a new run starts in.

A run folder without a checkpoint to resume from starts a new run at env
step 0. When it still holds what an earlier run wrote (a run stopped before
its first checkpoint, or one whose checkpoints/ was deleted), those files
would mix with the new run's: its metrics rows, its config.json overwritten,
its wandb run id taken over, its TensorBoard files drawn as one curve with
the new ones. `set_aside` moves them, together, into `earlier_run.<n>/`
inside the folder, so the earlier run keeps its config beside its metrics,
the new run gets a new wandb run id, and `tensorboard --logdir` shows the
two as two runs.
"""

import fnmatch
import json
import os
from typing import List, Optional, Tuple

# What a run writes into its folder, besides checkpoints/ and run.lock
# (docs/run_folder.md, "The files"): names or shell patterns. Not what the
# new run itself writes before its folder is adopted: process_N.log
# (launch/multihost_local.sh, from the start) and nle/ (NetHack ttyrecs,
# from the actors' start).
RUN_FILES = ('config.json', 'config.*.json', 'metrics.jsonl', 'metrics.after-*.jsonl',
             'wandb', 'wandb_run_id.txt', 'wandb_failed.txt', 'events.out.tfevents.*',
             'tensorboard_failed.txt', 'eval', 'saliency')
ASIDE_PREFIX = 'earlier_run.'


def run_files(workdir: str) -> List[str]:
  """The names in a run folder that an earlier run wrote (RUN_FILES), sorted.

  Only plain files and folders count: a symbolic link or a device under one
  of those names was put there by hand, and stays.

  Args:
    workdir: the run folder.

  Returns:
    The matching names; [] when the folder does not exist.
  """
  try:
    names = os.listdir(workdir)
  except FileNotFoundError:
    return []
  return sorted(n for n in names if any(fnmatch.fnmatchcase(n, p) for p in RUN_FILES)
                and _written(os.path.join(workdir, n)))


def _written(path: str) -> bool:
  """A plain file or folder, as a run writes them; not a symbolic link or a
  device someone placed there (a metrics.jsonl linked to /dev/full)."""
  return not os.path.islink(path) and (os.path.isfile(path) or os.path.isdir(path))


def last_env_step(workdir: str) -> Optional[int]:
  """The largest env_steps of a folder's metrics.jsonl rows; None without any.

  Lines that are not JSON rows with a number in env_steps are skipped: this
  only describes the earlier run in a note.
  """
  last = None
  path = os.path.join(workdir, 'metrics.jsonl')
  if not _written(path) or not os.path.isfile(path):   # never read a device (endless)
    return None
  try:
    with open(path) as f:
      for line in f:
        try:
          step = json.loads(line).get('env_steps')
        except (ValueError, AttributeError):
          continue
        if isinstance(step, (int, float)) and not isinstance(step, bool) and step == step:
          last = int(step) if last is None else max(last, int(step))
  except OSError:
    return None
  return last


def _free_aside(workdir: str) -> str:
  n = 1
  while os.path.lexists(os.path.join(workdir, f'{ASIDE_PREFIX}{n}')):
    n += 1
  return os.path.join(workdir, f'{ASIDE_PREFIX}{n}')


def set_aside(workdir: str) -> Optional[Tuple[str, List[str], Optional[int]]]:
  """Moves an earlier run's files out of the way of a new run in the same folder.

  For a folder a new run starts in (no checkpoint to resume from). The
  files named by RUN_FILES move into the first free `earlier_run.<n>/`
  in the folder, by rename (the same file system: nothing is copied).

  Args:
    workdir: the run folder.

  Returns:
    None when the folder holds none of them; else (the folder they moved
    to, the names moved, the earlier run's last logged env step or None).

  Raises:
    OSError: when the folder cannot be made or a file cannot be moved; the
      files moved before stay in it, the others where they were.
  """
  names = run_files(workdir)
  if not names:
    return None
  last = last_env_step(workdir)
  aside = _free_aside(workdir)
  os.mkdir(aside)
  for name in names:
    os.rename(os.path.join(workdir, name), os.path.join(aside, name))
  return aside, names, last


def describe(workdir: str, moved: Tuple[str, List[str], Optional[int]]) -> str:
  """One line for the progress output about what `set_aside` moved."""
  aside, names, last = moved
  logged = f'logged to env step {last:,}' if last is not None else 'no metrics rows'
  return (f'{workdir} held an earlier run with no checkpoint to resume from ({logged}); '
          f'its {len(names)} file(s) ({", ".join(names)}) moved to {aside}. This run starts '
          'at env step 0 with a new wandb run id')
