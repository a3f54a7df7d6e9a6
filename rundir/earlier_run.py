"""An earlier run's files in a folder that a new run starts in (no checkpoint to resume from). Left
in place they would mix with the new run's (metrics rows, config, wandb run id, TensorBoard curves);
`set_aside` moves them together into `earlier_run.<n>/`."""

import fnmatch
import json
import os
from typing import List, Optional, Tuple

# What a run writes into its folder besides checkpoints/ and run.lock, as names or shell patterns;
# not process_N.log and nle/, which the new run itself writes before its folder is adopted.
RUN_FILES = ('config.json', 'config.*.json', 'metrics.jsonl', 'metrics.after-*.jsonl',
             'wandb', 'wandb_run_id.txt', 'wandb_failed.txt', 'events.out.tfevents.*',
             'tensorboard_failed.txt', 'eval', 'saliency')
ASIDE_PREFIX = 'earlier_run.'


def run_files(workdir: str) -> List[str]:
  """The names in `workdir` matching RUN_FILES, sorted ([] without the folder);
  only plain files and folders: a link or a device there was put by hand, and stays."""
  try:
    names = os.listdir(workdir)
  except FileNotFoundError:
    return []
  return sorted(n for n in names if any(fnmatch.fnmatchcase(n, p) for p in RUN_FILES)
                and _written(os.path.join(workdir, n)))


def _written(path: str) -> bool:
  """A plain file or folder, not a link or a device (a metrics.jsonl linked to /dev/full)."""
  return not os.path.islink(path) and (os.path.isfile(path) or os.path.isdir(path))


def last_env_step(workdir: str) -> Optional[int]:
  """The largest env_steps of the folder's metrics.jsonl rows; None without
  any. Rows that do not parse are skipped: this only feeds a note."""
  last = None
  path = os.path.join(workdir, 'metrics.jsonl')
  if not _written(path) or not os.path.isfile(path):   # never read a device (endless)
    return None
  try:
    with open(path, 'rb') as f:   # bytes: a cut write may leave bytes that are not UTF-8
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
  """Moves an earlier run's RUN_FILES by rename into the first free `earlier_run.<n>/`.

  Returns:
    None when there are none; else (the folder they moved to, the names
    moved, the earlier run's last logged env step or None).

  Raises:
    OSError: a move failed; files moved before stay moved.
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
