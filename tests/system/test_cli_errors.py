"""launch/train.py with a bad config: exit status 2 and one `error:` line
naming the field, no traceback (a process per case: seconds each)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize('args,expected', [
    (['--config=configs/cartpole.py', '--config.batch_size=0'], 'batch_size'),
    (['--config=configs/cartpole.py', '--config.batch_sizee=3'], 'unknown config field'),
    (['--config=configs/cartpole.py:smok'], "unknown config variant 'smok'"),
    (['--config=configs/cartpole.py', '--config.reward_mode=foo'], 'reward_mode'),
    (['--config=configs/atari_single.py:game=NotAGame'], 'unknown Atari game(s) NotAGame; valid games: Adventure'),
    (['--config=configs/atari_popart.py:games=Pong+Pnog'], 'unknown Atari game(s) Pnog'),
    (['--config=configs/atari_popart.py', '--config.atari.action_set=minimal'], 'atari.action_set'),
    (['--config=configs/atari_single.py', '--config.network.name=attention'], 'network.lstm_size'),
    (['--config=configs/missing.py'], 'No such file'),
])
def test_cli_reports_one_line_without_traceback(args, expected):
  proc = subprocess.run([sys.executable, 'launch/train.py', *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2, proc.stderr
  assert 'Traceback' not in proc.stderr
  errors = [l for l in proc.stderr.splitlines() if l.startswith('error:')]
  assert len(errors) == 1 and expected in errors[0], proc.stderr
