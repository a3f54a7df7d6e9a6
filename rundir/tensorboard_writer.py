"""A run's metrics as TensorBoard event files in the run folder, written with tensorboardX: the
scalars of metrics.jsonl at x = env_steps, the config as text, and its hyperparameters in the
HParams tab, ranked by RANKING_METRIC. Errors are the caller's."""

import json
import time
from typing import Any, Dict, Optional

from configs import resume

FLUSH_SECONDS = 10        # events reach the disk at least this often
RANKING_METRIC = 'mean_episode_return'  # the HParams tab's metric column


def hyperparameters(source: Dict[str, Any]) -> Dict[str, Any]:
  """A config's leaves (a RunSpec's source) as HParams values, by flattened field name.

  Lists and tuples become JSON text (TensorBoard takes no others); `workdir`
  and None values are left out.
  """
  flat = resume.flatten(dict(source))
  out = {}
  for field, value in flat.items():
    if field == 'workdir' or value is None:
      continue
    out[field] = value if isinstance(value, (bool, int, float, str)) else json.dumps(value)
  return out


def scalars(metrics: Dict[str, Any]) -> Dict[str, float]:
  """The int and float entries of a metrics row as floats (bools left out)."""
  return {k: float(v) for k, v in metrics.items()
          if isinstance(v, (int, float)) and not isinstance(v, bool)}


class TensorBoardWriter:
  """Writes a run's metrics rows as TensorBoard event files in `logdir`.

  The constructor writes the config (a RunSpec's source) as text and the HParams summary at step
  `resume_step` or 0; `resume_step` also drops the earlier files' points after
  it. Raises ImportError without tensorboardX.
  """

  def __init__(self, logdir: str, source: Dict[str, Any], resume_step: Optional[int] = None):
    from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
    from tensorboardX.summary import hparams  # pylint: disable=import-outside-toplevel
    # TensorBoard reads a folder's files in name order, named to the second: the nanosecond suffix
    # keeps a resume within that second from overwriting the earlier file.
    purge_step = None if resume_step is None else resume_step + 1
    self._writer = SummaryWriter(logdir, purge_step=purge_step, flush_secs=FLUSH_SECONDS,
                                 filename_suffix=f'.{time.time_ns()}')
    step = resume_step or 0
    self._writer.add_text('config', '```\n' + json.dumps(source, indent=2, sort_keys=True)
                          + '\n```', step)
    for summary in hparams(hyperparameters(source), {RANKING_METRIC: 0.0}):
      self._writer.file_writer.add_summary(summary, step)

  def write(self, metrics: Dict[str, Any]) -> None:
    """Adds every scalar of a metrics row but env_steps, at x = its env_steps."""
    step = int(metrics['env_steps'])
    for tag, value in scalars(metrics).items():
      if tag != 'env_steps':
        self._writer.add_scalar(tag, value, step)

  def close(self) -> None:
    self._writer.close()
