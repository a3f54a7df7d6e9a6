"""Evaluates NLE's own agent on the games our evaluator plays a run's task on.

  python launch/evaluate_peer.py --model_tar=/tmp/nle_agent/latest/model.tar \
      --workdir=runs/monk_500k --episodes=30

`--workdir` (one of our NLE runs) names the task and env settings; with the same --seed both agents
play the same games. `model.tar` is what `python -m nle.agent.agent` saves (NLE 1.3.0;
analysis/peer_agent.py); needs torch (requirements-peer.txt). Writes
<workdir>/eval/peer_<agent steps>.json in launch/evaluate.py's format.
"""

import json
import os
import warnings

from absl import app
from absl import flags
from absl import logging

from agents.checkpoint import CheckpointError
from analysis import evaluation
from analysis import peer_agent
from analysis.run_loading import load_run
from configs.validation import ConfigError
from infra import atomic_write
from infra import cli

_MODEL_TAR = flags.DEFINE_string('model_tar', None, "NLE agent's model.tar.")
_WORKDIR = flags.DEFINE_string('workdir', None, "One of this project's NLE runs: its task and env "
                               'settings, and where eval/peer_*.json goes.')
_TASK = flags.DEFINE_string('task', None, "The run's task to play (a character); default: the "
                            "run's only task.")
_EPISODES = flags.DEFINE_integer('episodes', 10, 'Whole episodes.', lower_bound=1)
_GREEDY = flags.DEFINE_bool('greedy', False, 'Argmax actions (NLE --mode test) instead of sampling.')
_MAX_STEPS = flags.DEFINE_integer('max_steps', None, 'Safety cap on batched env steps.',
                                  lower_bound=1)
_NUM_ENVS = flags.DEFINE_integer('num_envs', 8, 'Envs stepped in parallel.', lower_bound=1)
_SEED = flags.DEFINE_integer('seed', 0, 'Seeds the envs (as launch/evaluate.py) and the sampling.')
_OVERWRITE = flags.DEFINE_bool('overwrite', False, 'Replace an earlier eval/peer_*.json.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  logging.set_verbosity(logging.ERROR)
  warnings.filterwarnings('ignore', message='.*precision lowered by casting.*')
  try:
    run = load_run(_WORKDIR.value)
    peer = peer_agent.load_nle_agent(_MODEL_TAR.value)
    print(f'NLE agent from {_MODEL_TAR.value}; playing {_EPISODES.value} episodes')
    record = peer_agent.evaluate(run, peer, _MODEL_TAR.value, _TASK.value, _EPISODES.value,
                                 _GREEDY.value, _MAX_STEPS.value, _NUM_ENVS.value, _SEED.value)
  except (FileNotFoundError, ConfigError, CheckpointError, ImportError, ValueError) as e:
    cli.fail(str(e))
  eval_dir = os.path.join(_WORKDIR.value, 'eval')
  steps = record['env_steps']
  try:   # whole or not at all; a full disk is one line
    os.makedirs(eval_dir, exist_ok=True)
    path = evaluation.result_path(eval_dir, f'peer_{"final" if steps is None else steps}',
                                  _OVERWRITE.value)
    with atomic_write.atomic_open(path) as f:
      json.dump(record, f, indent=2)
  except OSError as e:
    cli.fail(f'cannot write into {eval_dir}: {e.strerror or e}')
  print(evaluation.format_table(record))
  print(f'written: {path}')


if __name__ == '__main__':
  flags.mark_flags_as_required(['model_tar', 'workdir'])
  cli.run(main)
