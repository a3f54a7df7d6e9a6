"""launch/train.py with a bad config, and the plotting tools on a folder that
is not a run or whose archived metrics are cut off: exit status 2 and one `error:` line naming the field or the
file, no traceback (a process per case: seconds each)."""

import gzip
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
    (['--config=configs/nethack_popart.py:chars=kni-elf-law-mal'], 'a Knight must be human'),
])
def test_cli_reports_one_line_without_traceback(args, expected):
  proc = subprocess.run([sys.executable, 'launch/train.py', *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2, proc.stderr
  assert 'Traceback' not in proc.stderr
  errors = [l for l in proc.stderr.splitlines() if l.startswith('error:')]
  assert len(errors) == 1 and expected in errors[0], proc.stderr


def _tool(script, *args):
  return subprocess.run([sys.executable, os.path.join(ROOT, 'launch', script), *args],
                        check=False, capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_a_folder_that_is_not_a_run_is_one_line(tmp_path):
  # Before: a 20-line traceback above the clear last line.
  empty = tmp_path / 'empty'
  empty.mkdir()
  foreign = tmp_path / 'foreign'
  foreign.mkdir()
  (foreign / 'metrics.jsonl').write_text('{"env_steps": 1}\nnot json at all\n')
  cut = tmp_path / 'cut'   # an archive copied half-way
  cut.mkdir()
  data = gzip.compress(''.join(f'{{"env_steps": {i}}}\n' for i in range(5000)).encode())
  (cut / 'metrics.jsonl.gz').write_bytes(data[:len(data) // 2])
  for script in ('plot_runs.py', 'run_table.py'):
    out = _tool(script, str(empty), f'--output={tmp_path / "x.png"}' if script == 'plot_runs.py'
               else '--window=10')
    assert out.returncode == 2 and 'Traceback' not in out.stderr, out.stderr
    assert out.stderr.strip() == f'error: {empty} has no metrics.jsonl'
    out = _tool(script, str(foreign))
    assert out.returncode == 2 and 'Traceback' not in out.stderr, out.stderr
    assert out.stderr.strip() == (f"error: {foreign / 'metrics.jsonl'} line 2 is not a JSON "
                                  "metrics row: 'not json at all'")
    out = _tool(script, str(cut))
    assert out.returncode == 2 and 'Traceback' not in out.stderr, out.stderr
    assert out.stderr.strip().startswith(
        f"error: {cut / 'metrics.jsonl.gz'} is cut off or damaged after line "), out.stderr


@pytest.mark.parametrize('tool', ['run_table.py {}', 'evaluate.py --workdir={}',
                                  'diagnose_update.py --workdir={}', 'saliency.py --workdir={}'])
def test_a_config_json_that_is_not_json_is_one_line(tmp_path, tool):
  (tmp_path / 'metrics.jsonl').write_text('{"env_steps": 100}\n')
  (tmp_path / 'config.json').write_text('not json')
  out = _tool(*tool.format(tmp_path).split())
  assert out.returncode == 2 and 'Traceback' not in out.stderr, out.stderr
  assert out.stderr.strip().splitlines()[-1] == (
      f"error: cannot read {tmp_path / 'config.json'} (Expecting value: line 1 column 1 "
      "(char 0))"), out.stderr


@pytest.mark.parametrize('flag, line', [
    ('--seconds=-1', 'error: --seconds must be > 0, got -1.0'),   # was a fatal abort in JAX
    ('--seconds=0', 'error: --seconds must be > 0, got 0.0'),     # was 0 agent steps/s as a result
    ('--stages=raw,bogus', 'error: unknown stage(s) bogus; choose from raw, actors, loop, learner, '
                           'train'),
    ('--output={}/nope/x.json', 'error: --output: no folder {}/nope to write x.json in'),
])
def test_the_benchmarks_bad_flags_are_one_line_before_measuring(tmp_path, flag, line):
  out = _tool('benchmark.py', '--config=configs/cartpole.py', flag.format(tmp_path))
  assert out.returncode == 2 and 'Traceback' not in out.stderr, out.stderr
  assert out.stderr.strip() == line.format(tmp_path), out.stderr


def test_plot_pbt_on_a_folder_that_is_not_a_population_or_has_no_game_yet_is_one_line(tmp_path):
  out = _tool('plot_pbt.py', f'--population={tmp_path / "nothing"}', f'--output={tmp_path / "p.png"}')
  assert out.returncode == 2 and 'Traceback' not in out.stderr, out.stderr
  assert out.stderr.strip() == (f'error: {tmp_path / "nothing"} is not a population folder '
                                f'(no {tmp_path / "nothing" / "members"})')
  member = tmp_path / 'pop' / 'members' / 'member_00000'
  member.mkdir(parents=True)
  (member / 'metrics.jsonl').write_text('{"env_steps": 10, "episode_return/Car')   # cut, live
  (member / 'config.json').write_text('{"pbt": {"adapt": ["learning_rate"]}}')
  out = _tool('plot_pbt.py', f'--population={tmp_path / "pop"}', f'--output={tmp_path / "p.png"}')
  assert out.returncode == 2 and 'Traceback' not in out.stderr, out.stderr
  assert out.stderr.strip() == f'error: no member of {tmp_path / "pop"} has finished a game yet'
  assert not (tmp_path / 'p.png').exists()

