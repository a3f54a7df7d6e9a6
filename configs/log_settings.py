"""The logging settings (the `log` and `wandb` groups), defined here, below
agents/trainer.py and rundir/run_logger.py which read them, because
common.base_config may import only the layers below it."""

import dataclasses
from typing import Tuple

from infra.settings import at_least, boolean, one_of, setting, text, texts

WANDB_MODES = ('offline', 'online', 'disabled')


@dataclasses.dataclass(frozen=True)
class LogConfig:
  """What the run logs, and how often."""
  every_seconds: float = setting(10.0, 'metrics.jsonl / wandb / progress-line cadence',
                                 at_least(0))
  progress: bool = setting(True, 'print a progress line at each log step', boolean)
  tensorboard: bool = setting(True, 'TensorBoard event files in the run folder (tensorboard '
                              '--logdir runs/)', boolean)
  task_gradients_seconds: float = setting(
      120.0, "multi-task runs: every this many seconds, each task's policy and value gradient "
      'norms on the shared torso and their shares (grad_policy/<task>, '
      'grad_share_baseline/<task>, ...; V-trace); 0 = off', at_least(0))


@dataclasses.dataclass(frozen=True)
class WandbConfig:
  """Weights & Biases: offline by default (no account needed)."""
  mode: str = setting('offline', "'offline' (no account needed), 'online' or 'disabled'",
                      one_of(WANDB_MODES))
  project: str = setting('popart-impala', 'wandb project', text)
  entity: str = setting('', "wandb entity (team); '' = your default", text)
  group: str = setting('', "wandb group; '' = config_name", text)
  tags: Tuple[str, ...] = setting((), 'extra wandb tags', texts)
