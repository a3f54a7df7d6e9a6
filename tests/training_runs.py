"""Training a config for real inside a test and reading back its metrics."""

import json
import os

from launch.train import train


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
