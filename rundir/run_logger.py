"""Where a run's results go: <workdir>/config.json, metrics.jsonl, wandb (offline by default),
TensorBoard event files, terminal. Only the primary process writes.

Guarantees: every metrics line is flushed as written, so nothing logged before a crash is lost. A
wandb or TensorBoard failure only drops that writer for the rest of the run, with a warning and a
note in `wandb_failed.txt` / `tensorboard_failed.txt`; a metrics.jsonl that cannot be written raises
MetricsWriteError, which the trainer answers with a checkpoint and a one-line stop.
"""

import datetime
import json
import math
import os
import sys
import time
import uuid
from typing import Dict, Optional, Sequence

from rundir import run_folder
from rundir.run_folder import RunFolderError
from rundir.tensorboard_writer import TensorBoardWriter

WANDB_FAILED_FILE = 'wandb_failed.txt'
TENSORBOARD_FAILED_FILE = 'tensorboard_failed.txt'


class MetricsWriteError(OSError):
  """metrics.jsonl cannot be written; the message is one line naming it."""


def _jsonable(value):
  if isinstance(value, float) and not math.isfinite(value):
    return str(value)
  return value


def _wandb_run_id(workdir: str) -> str:
  """The workdir's wandb run id, made once and kept there, so a resume continues its wandb run."""
  path = os.path.join(workdir, 'wandb_run_id.txt')
  if os.path.exists(path):
    with open(path) as f:
      return f.read().strip()
  run_id = uuid.uuid4().hex[:12]
  with open(path, 'w') as f:
    f.write(run_id)
  return run_id


class RunLogger:
  """Writes a run's config and metrics rows to every destination of the module docstring.

  On the primary process it writes config.json (the spec's source) and opens metrics.jsonl, wandb
  (unless spec.wandb.mode is 'disabled') and TensorBoard (spec.log.tensorboard).

  Args:
    process_index: the prefix of its messages when not primary.
    resume_step: the env step a resumed run starts from (None: a new run);
      TensorBoard drops earlier points from there on.

  Raises:
    RunFolderError: config.json or metrics.jsonl cannot be written.
  """

  def __init__(self, workdir: str, spec, task_names: Sequence[str], primary: bool = True,
               process_index: int = 0, resume_step: Optional[int] = None):
    self.workdir = workdir
    self._task_names = tuple(task_names)
    self._primary = primary
    self._prefix = '' if primary else f'[process {process_index}] '
    self._metrics = self._wandb = self._tensorboard = None
    self.metrics_path = run_folder.metrics_path(workdir)
    self.wandb_failure: Optional[str] = None  # why wandb was dropped, if it was
    self.tensorboard_failure: Optional[str] = None  # why TensorBoard was dropped, if it was
    if not primary:
      return
    try:
      os.makedirs(workdir, exist_ok=True)
      with open(run_folder.config_path(workdir), 'w') as f:
        f.write(json.dumps(spec.source, indent=2, sort_keys=True))
      self._metrics = open(self.metrics_path, 'a', buffering=1)
    except OSError as e:
      raise RunFolderError(f'cannot write {e.filename or workdir}: {e.strerror or e}') from None
    self._start = time.time()
    self._progress = bool(spec.log.progress)
    self._last_returns: Dict[str, float] = {}
    self._last_env_steps = 0
    self._wandb = None
    wb, name = spec.wandb, spec.run.config_name
    if wb.mode != 'disabled':
      try:
        import wandb  # imported only when used: it is slow to import
        os.environ.setdefault('WANDB_SILENT', 'true')
        self._wandb = wandb.init(
            id=_wandb_run_id(workdir), resume='allow',  # a resumed run continues its wandb run
            project=wb.project, entity=wb.entity or None, group=wb.group or name,
            mode=wb.mode, dir=workdir, config=dict(spec.source), tags=[name, *wb.tags],
            name=os.path.basename(os.path.normpath(workdir)))
      except Exception as e:  # noqa: BLE001 -- wandb raises many kinds; none may stop the run
        self._wandb_failed(e, 'starting')
    if spec.log.tensorboard:
      try:
        self._tensorboard = TensorBoardWriter(workdir, spec.source, resume_step=resume_step)
      except Exception as e:  # noqa: BLE001 -- no writer may stop the run
        self._tensorboard_failed(e, 'starting')

  def write(self, metrics: Dict) -> None:
    """Writes one metrics row everywhere; does nothing on other processes.

    metrics.jsonl gets {'time': seconds since open, **metrics}, non-finite floats as strings; wandb
    the row at step env_steps, plus each task's action frequencies as a histogram. The progress line
    needs 'learner_steps', 'sps', 'loss/total', 'entropy' and 'policy_lag'.

    Raises:
      MetricsWriteError: metrics.jsonl cannot take the row.
    """
    if not self._primary:
      return
    record = {'time': round(time.time() - self._start, 3), **metrics}
    try:
      self._metrics.write(json.dumps({k: _jsonable(v) for k, v in record.items()}) + '\n')
      self._metrics.flush()
    except OSError as e:
      raise MetricsWriteError(
          e.errno, f'cannot write metrics to {self.metrics_path}: {e.strerror or e}') from e
    self._last_env_steps = int(metrics['env_steps'])
    if self._wandb is not None:
      try:
        self._wandb.log({**metrics, **self._action_histograms(metrics)},
                        step=int(metrics['env_steps']))
      except Exception as e:  # noqa: BLE001 -- e.g. wandb-core died: metrics.jsonl goes on
        self._wandb_failed(e, f'logging env step {int(metrics["env_steps"]):,}')
    if self._tensorboard is not None:
      try:
        self._tensorboard.write(metrics)
      except Exception as e:  # noqa: BLE001 -- e.g. a full disk: metrics.jsonl goes on
        self._tensorboard_failed(e, f'logging env step {int(metrics["env_steps"]):,}')
    if self._progress:
      self._print_progress(metrics)

  def _action_histograms(self, metrics: Dict) -> Dict:
    """Each task's action frequencies as one wandb histogram (bin i = action i)."""
    import wandb
    out = {}
    for name in self._task_names:
      prefix = f'actions/{name}/'
      freqs = [v for k, v in metrics.items() if k.startswith(prefix)]
      if freqs:
        out[f'action_histogram/{name}'] = wandb.Histogram(
            np_histogram=(freqs, list(range(len(freqs) + 1))))
    return out

  def _print_progress(self, m: Dict) -> None:
    for name in self._task_names:
      if f'episode_return/{name}' in m:
        self._last_returns[name] = m[f'episode_return/{name}']
    returns = ' '.join(f'{n}={self._last_returns[n]:.4g}' for n in self._task_names
                       if n in self._last_returns)
    line = (f'[{time.time() - self._start:7.0f}s] steps {m["env_steps"]:,} '
            f'learner {m["learner_steps"]:,} sps {m["sps"]:,.0f} '
            f'loss {m["loss/total"]:.4g} entropy {m["entropy"]:.3f} '
            f'lag {m["policy_lag"]:.1f} | return {returns or "(no episode yet)"}')
    print(line, file=sys.stdout, flush=True)

  def _writer_failed(self, name: str, note_file: str, e: BaseException, doing: str) -> str:
    """Warns and notes in the workdir that a writer is dropped; returns the one-line reason."""
    first = next((line.strip() for line in str(e).splitlines() if line.strip()), '')
    reason = f'{type(e).__name__}: {first}'[:300]
    self.message(f'warning: {name} failed while {doing} ({reason}); {name} is off for the '
                 f'rest of this run, metrics go on in {self.metrics_path}')
    try:
      with open(os.path.join(self.workdir, note_file), 'a') as f:
        f.write(f'{datetime.datetime.now().isoformat(timespec="seconds")} while {doing}: '
                f'{reason}\n')
    except OSError:
      pass
    return reason

  def _tensorboard_failed(self, e: BaseException, doing: str) -> None:
    self.tensorboard_failure = self._writer_failed('TensorBoard', TENSORBOARD_FAILED_FILE, e,
                                                   doing)
    writer, self._tensorboard = self._tensorboard, None
    if writer is not None:
      try:
        writer.close()
      except Exception:  # noqa: BLE001 -- it already failed once
        pass

  def _wandb_failed(self, e: BaseException, doing: str) -> None:
    """Drops wandb for the rest of the run; metrics.jsonl is unaffected."""
    self.wandb_failure = self._writer_failed('wandb', WANDB_FAILED_FILE, e, doing)
    run, self._wandb = self._wandb, None
    if run is not None:
      try:
        run.finish(exit_code=1)  # marks the run failed, where wandb still can
      except Exception:  # noqa: BLE001 -- it already failed once
        pass
    try:  # frees wandb's service and its exit hook, which would print a traceback at exit
      import wandb
      wandb.teardown(exit_code=1)
    except KeyboardInterrupt:
      raise
    except BaseException:  # noqa: BLE001 -- incl. the SystemExit its teardown may raise
      pass

  def message(self, text: str) -> None:
    """Prints `text` to stderr, flushed, prefixed '[process <i>] ' off the primary."""
    print(self._prefix + text, file=sys.stderr, flush=True)

  def close(self) -> None:
    """Closes metrics.jsonl, wandb and TensorBoard; a writer's failure here is only a warning."""
    if self._metrics is not None:
      try:
        self._metrics.close()
      except OSError:
        pass
      self._metrics = None
    run, self._wandb = self._wandb, None
    if run is not None:
      try:
        run.finish()
      except Exception as e:  # noqa: BLE001
        self._wandb_failed(e, 'finishing')
    writer, self._tensorboard = self._tensorboard, None
    if writer is not None:
      try:
        writer.close()
      except Exception as e:  # noqa: BLE001 -- e.g. its last flush hit a full disk
        self.tensorboard_failure = self._writer_failed('TensorBoard', TENSORBOARD_FAILED_FILE,
                                                       e, 'finishing')
