"""Training a config for real inside a test and reading back its metrics."""

import json
import os

from configs import cartpole
from configs import validation
from rundir import lifecycle


def train(config, stop_requested=None):
  """launch/train.py's path for a config: validated into its RunSpec (the
  composition root), then trained by rundir/lifecycle.train."""
  return lifecycle.train(validation.validate_everywhere(config), stop_requested)


def read_records(path):
  """A metrics.jsonl's rows."""
  with open(path) as f:
    return [json.loads(line) for line in f]


def smoke_config(workdir, updates=3, every_update=True):
  """(CartPole smoke config for `updates` learner updates in `workdir` on one
  learner device, wandb off, a checkpoint every update unless told not to;
  env steps per update)."""
  config = cartpole.get_config('smoke')
  config.workdir = str(workdir)
  config.wandb.mode = 'disabled'
  config.num_learner_devices = 1
  per_update = config.unroll_length * config.batch_size
  config.total_env_steps = updates * per_update
  if every_update:
    config.checkpoint_every_steps = per_update
  return config, per_update


def train_and_read(config, tmp_path, log_every_seconds=2.0):
  """Trains `config` quietly in tmp_path/run on one learner device; returns
  the run's metrics.jsonl records."""
  with config.unlocked():
    config.workdir = str(tmp_path / 'run')
    config.wandb.mode = 'disabled'
    config.num_learner_devices = 1
    config.log.every_seconds = log_every_seconds
  _, workdir = train(config)
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f]
