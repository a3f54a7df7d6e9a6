"""A run's metrics as TensorBoard event files, beside metrics.jsonl and wandb.

`tensorboard --logdir runs/` then shows every run folder (and every PBT
member's) as a run: the same scalars as metrics.jsonl at x = env_steps
(`actions/<task>/<action>` frequencies as scalars too), the config as text,
and its scalar hyperparameters in the HParams tab, ranked by
`mean_episode_return`. Written with tensorboardX (no TensorFlow); the event
files go in the run folder itself (`events.out.tfevents.*`).

A resumed run passes `resume_step`, the env step of the checkpoint it resumed
from: TensorBoard then drops the earlier files' points after that step (no
checkpoint holds them; metrics.jsonl sets those rows aside alike), so a
curve has no doubled stretch.

Errors are the caller's to catch (rundir/run_logger.py drops TensorBoard
with one warning and goes on).
"""

import json
import time
from typing import Any, Dict, Optional

from configs import resume

FLUSH_SECONDS = 10        # events reach the disk at least this often
RANKING_METRIC = 'mean_episode_return'  # the HParams tab's metric column


def hyperparameters(config) -> Dict[str, Any]:
  """The config's leaves as HParams values.

  Args:
    config: the run config (ml_collections).

  Returns:
    Flattened field name (configs.resume.flatten) -> value: numbers, strings
    and bools as they are, lists and tuples as their JSON text (TensorBoard
    takes no others); `workdir` and None values left out (the workdir names
    the run already).
  """
  flat = resume.flatten(json.loads(config.to_json_best_effort(sort_keys=True)))
  out = {}
  for field, value in flat.items():
    if field == 'workdir' or value is None:
      continue
    out[field] = value if isinstance(value, (bool, int, float, str)) else json.dumps(value)
  return out


def scalars(metrics: Dict[str, Any]) -> Dict[str, float]:
  """The numeric entries of a metrics row.

  Args:
    metrics: one log row.

  Returns:
    Name -> float for the int and float entries; bools and strings left out.
  """
  return {k: float(v) for k, v in metrics.items()
          if isinstance(v, (int, float)) and not isinstance(v, bool)}


class TensorBoardWriter:
  """Writes a run's metrics rows as TensorBoard event files in `logdir`.

  The constructor writes the config as text 'config' and the HParams
  summary (hyperparameters(config), ranked by RANKING_METRIC) at step
  `resume_step` or 0. Events are flushed at least every FLUSH_SECONDS.

  Args:
    logdir: the folder of the event files (the run folder).
    config: the run config.
    resume_step: the env step of the checkpoint a resumed run starts from;
      earlier files' points after it are dropped. None: a new run.

  Raises:
    ImportError: without tensorboardX. Other errors of the writer propagate
      (the module docstring).
  """

  def __init__(self, logdir: str, config, resume_step: Optional[int] = None):
    from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
    from tensorboardX.summary import hparams  # pylint: disable=import-outside-toplevel
    # The file name has the time in seconds and the host; TensorBoard reads
    # a folder's files in name order. The nanosecond suffix keeps a resume
    # within the same second from overwriting the earlier file and sorts it
    # after it.
    # TensorBoard drops the points at and after `purge_step`.
    purge_step = None if resume_step is None else resume_step + 1
    self._writer = SummaryWriter(logdir, purge_step=purge_step, flush_secs=FLUSH_SECONDS,
                                 filename_suffix=f'.{time.time_ns()}')
    step = resume_step or 0
    self._writer.add_text('config', '```\n' + config.to_json_best_effort(indent=2, sort_keys=True)
                          + '\n```', step)
    for summary in hparams(hyperparameters(config), {RANKING_METRIC: 0.0}):
      self._writer.file_writer.add_summary(summary, step)

  def write(self, metrics: Dict[str, Any]) -> None:
    """Adds every scalar of a metrics row (`scalars`) but env_steps, at x = its env_steps."""
    step = int(metrics['env_steps'])
    for tag, value in scalars(metrics).items():
      if tag != 'env_steps':
        self._writer.add_scalar(tag, value, step)

  def close(self) -> None:
    """Flushes and closes the event file."""
    self._writer.close()
