"""launch/train.py with a bad config, and the tools in launch/ on odd input (a
folder that is not a run, archived metrics cut off, a config file that does
not load, an output in a missing folder, a full disk): exit status 2 and one
`error:` line naming the field or the file, no traceback, no file left
half-written (a process per case: seconds each)."""

import gzip
import json
import os
import subprocess
import sys

import pytest

from tests.support import full_disk

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
                                  'diagnose_update.py --workdir={}', 'saliency.py --workdir={}',
                                  'attention_maps.py --workdir={}'])
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
    ('--output={}', 'error: --output: {} is a folder, not a file'),   # was a traceback at the end
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



# A disk that fills while a figure is saved: the file is cut short, then ENOSPC.
_FULL_DISK = '''
import errno, os, runpy, sys
from matplotlib.figure import Figure
from PIL import Image
def _full(real):
  def save(self, fp, *args, **kwargs):
    real(self, fp, *args, **kwargs)
    with open(fp, 'r+b') as f:
      f.truncate(10)
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
  return save
Figure.savefig = _full(Figure.savefig)
Image.Image.save = _full(Image.Image.save)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name='__main__')
'''


def _tool_on_a_full_disk(script, *args):
  return subprocess.run([sys.executable, '-c', _FULL_DISK, os.path.join(ROOT, 'launch', script),
                         *args], check=False, capture_output=True, text=True, cwd=ROOT, timeout=300)


def _one_line(out, line):
  assert out.returncode == 2 and 'Traceback' not in out.stderr, out.stderr
  assert out.stderr.strip() == line, out.stderr


def _run_with_games(folder, task='CartPole'):
  folder.mkdir(parents=True)
  rows = [{'env_steps': 100 * i, 'time': i, f'episodes/{task}': 1,
           f'episode_return/{task}': float(i)} for i in range(1, 30)]
  (folder / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
  return folder


def test_archive_run_is_one_line_with_exit_status_2(tmp_path):
  # Before: 'archive_run: ...' and exit status 1.
  _one_line(_tool('archive_run.py', str(tmp_path / 'nothing'), str(tmp_path / 'a')),
            f'error: {tmp_path / "nothing"} has no metrics.jsonl: not a run folder, or the run '
            'never started')


def test_run_table_names_a_uniform_record_that_is_missing_or_not_json(tmp_path):
  # Before: a FileNotFoundError or JSONDecodeError traceback.
  run = _run_with_games(tmp_path / 'run')
  _one_line(_tool('run_table.py', str(run), f'--uniform={tmp_path / "u.json"}', '--window=10'),
            f'error: cannot read {tmp_path / "u.json"} (No such file or directory)')
  (tmp_path / 'u.json').write_text('{not json')
  out = _tool('run_table.py', str(run), f'--uniform={tmp_path / "u.json"}', '--window=10')
  assert out.returncode == 2 and 'Traceback' not in out.stderr, out.stderr
  assert out.stderr.strip().startswith(f'error: cannot read {tmp_path / "u.json"} (Expecting')


@pytest.mark.parametrize('script', ['plot_runs.py', 'plot_pbt.py', 'plot_side_by_side.py'])
def test_a_plots_output_in_a_missing_folder_is_refused_before_reading(tmp_path, script):
  # Before: a FileNotFoundError traceback once the figure was drawn. The
  # inputs here do not exist either: the output is checked first.
  nowhere = tmp_path / 'nowhere'
  args = {'plot_runs.py': [str(tmp_path / 'run'), f'--output={nowhere / "x.png"}'],
          'plot_pbt.py': [f'--population={tmp_path}', f'--output={nowhere / "x.png"}'],
          'plot_side_by_side.py': [f'--run={tmp_path}', f'--peer_dir={tmp_path}',
                                   f'--peer_stdout={tmp_path / "log"}', f'--output={nowhere / "x"}']}
  name = 'x_steps.png' if script == 'plot_side_by_side.py' else 'x.png'
  _one_line(_tool(script, *args[script]), f'error: --output: no folder {nowhere} to write {name} in')
  assert not nowhere.exists()


def test_plot_pbt_names_a_baseline_that_is_not_a_run_or_is_cut_off(tmp_path):
  # Before: a FileNotFoundError traceback (and an archived .gz baseline was not read).
  member = _run_with_games(tmp_path / 'pop' / 'members' / 'member_00000')
  (member / 'config.json').write_text('{"pbt": {"adapt": []}}')
  args = [f'--population={tmp_path / "pop"}', f'--output={tmp_path / "p.png"}']
  _one_line(_tool('plot_pbt.py', *args, f'--baseline={tmp_path / "none"}'),
            f'error: --baseline: {tmp_path / "none"} has no metrics.jsonl')
  cut = tmp_path / 'cut'
  cut.mkdir()
  data = gzip.compress(''.join(f'{{"env_steps": {i}}}\n' for i in range(5000)).encode())
  (cut / 'metrics.jsonl.gz').write_bytes(data[:len(data) // 2])
  out = _tool('plot_pbt.py', *args, f'--baseline={cut}')
  assert out.returncode == 2 and 'Traceback' not in out.stderr, out.stderr
  assert out.stderr.strip().startswith(
      f"error: --baseline: {cut / 'metrics.jsonl.gz'} is cut off or damaged after line "), out.stderr
  assert not (tmp_path / 'p.png').exists()


def test_compare_filters_on_a_missing_run_or_one_without_checkpoints_is_one_line(tmp_path):
  # Before: absl's usage text with exit status 1; a 'ValueError: run has no
  # checkpoints' traceback that named no folder.
  (tmp_path / 'a').mkdir()
  (tmp_path / 'b').mkdir()
  _one_line(_tool('compare_filters.py', f'--runs={tmp_path / "a"},{tmp_path / "none"}'),
            f'error: no such run folder: {tmp_path / "none"}')
  _one_line(_tool('compare_filters.py', f'--runs={tmp_path / "a"},{tmp_path / "b"}'),
            f'error: {tmp_path / "a"} has no checkpoints')


@pytest.mark.parametrize('script', ['inspect_frames.py', 'diagnose_update.py', 'benchmark.py'])
@pytest.mark.parametrize('flag, expected', [
    ('--config=configs/missing.py', 'No such file'),
    ('--config=configs/cartpole.py:smok', "unknown config variant 'smok'"),
])
def test_the_tools_config_file_mistakes_are_one_line(script, flag, expected):
  # Before: config_flags' traceback (two, chained) with exit status 1.
  out = _tool(script, flag, '--stages=raw' if script == 'benchmark.py' else '--output=')
  assert out.returncode == 2 and 'Traceback' not in out.stderr, out.stderr
  errors = [l for l in out.stderr.splitlines() if l.startswith('error:')]
  assert len(errors) == 1 and expected in errors[0], out.stderr


def test_diagnose_update_asks_the_learner_for_a_term_loss():
  # A capability of the learner (Learner.term_loss), not a check of its name.
  out = _tool('diagnose_update.py', '--config=configs/atari_single.py:game=Pong,recipe=ppo,smoke',
              '--output=')
  assert out.returncode != 0 and 'Traceback' not in out.stderr, out.stderr
  assert "loss.name='ppo' does not (loss.name in impala does" in out.stderr, out.stderr


def test_inspect_frames_on_a_config_that_does_not_validate_is_one_line():
  # Before: a SettingsError traceback.
  _one_line(_tool('inspect_frames.py', '--config=configs/cartpole.py', '--config.batch_size=0',
                  '--output='),
            'error: config field batch_size: must be a positive number, got 0')


def test_diagnose_update_refuses_an_output_in_a_missing_folder_before_measuring(tmp_path):
  # Before: it measured, then a FileNotFoundError traceback.
  _one_line(_tool('diagnose_update.py', '--config=configs/cartpole.py',
                  f'--output={tmp_path / "nowhere" / "d.json"}'),
            f'error: --output: no folder {tmp_path / "nowhere"} to write d.json in')


def test_plot_side_by_side_on_a_full_disk_is_one_line_and_leaves_no_file(tmp_path):
  # Before: an OSError traceback and a cut-off sbs_steps.png of 10 bytes.
  run = _run_with_games(tmp_path / 'run', 'mon-hum-neu-mal')
  peer = tmp_path / 'peer'
  (peer / 'latest').mkdir(parents=True)
  (peer / 'latest' / 'logs.tsv').write_text('# Step\tmean_episode_return\n500\t10.0\n3000\t40.0\n')
  (peer / 'nle.log').write_text(
      '[INFO:1 agent:571 2026-11-26 12:20:59,401] Steps 0 @ 0.0 SPS.\n'
      '[INFO:1 agent:571 2026-11-26 12:21:29,401] Steps 3000 @ 100.0 SPS.\n')
  out_dir = tmp_path / 'out'
  out_dir.mkdir()
  out = _tool_on_a_full_disk('plot_side_by_side.py', f'--run={run}', f'--peer_dir={peer}',
                             f'--peer_stdout={peer / "nle.log"}', f'--output={out_dir / "sbs"}',
                             '--bin_steps=1000', '--window=1000')
  _one_line(out, f'error: cannot write {out_dir / "sbs"}_*.png: No space left on device')
  assert os.listdir(out_dir) == []


@pytest.mark.parametrize('script', ['plot_runs.py', 'plot_pbt.py'])
def test_a_plot_on_a_full_disk_is_one_line_and_leaves_no_file(tmp_path, script):
  # Before: an OSError traceback (the PNG was already written whole or not at all).
  member = _run_with_games(tmp_path / 'pop' / 'members' / 'member_00000')
  (member / 'config.json').write_text('{"pbt": {"adapt": []}}')
  out_dir = tmp_path / 'out'
  out_dir.mkdir()
  args = ([str(member), '--window=300'] if script == 'plot_runs.py'
          else [f'--population={tmp_path / "pop"}', '--episodes=3'])
  out = _tool_on_a_full_disk(script, *args, f'--output={out_dir / "p.png"}')
  _one_line(out, f'error: cannot write {out_dir / "p.png"}: No space left on device')
  assert os.listdir(out_dir) == []


@pytest.mark.parametrize('script, args', [
    ('benchmark.py', ['--config=configs/cartpole.py', '--stages=raw', '--seconds=0.5',
                      '--warmup=0']),
    ('diagnose_update.py', ['--config=configs/cartpole.py', '--train_updates=0',
                            '--batches=1']),
    ('inspect_frames.py', ['--config=configs/atari_single.py:game=Pong,smoke', '--steps=200']),
])
def test_a_tools_output_on_a_full_disk_is_one_line_and_keeps_the_earlier_file(
    tmp_path, script, args):
  # Before issue [25]: an OSError traceback after the measuring, and an empty
  # or cut-off file where the earlier one was.
  out_dir = tmp_path / 'out'
  out_dir.mkdir()
  path = out_dir / ('frames.png' if script == 'inspect_frames.py' else 'out.json')
  path.write_text('earlier')
  out = full_disk.run_tool(script, out_dir, *args, f'--output={path}')
  assert out.returncode == 2 and 'Traceback' not in out.stderr, out.stderr[-3000:]
  errors = [line for line in out.stderr.splitlines() if line.startswith('error:')]
  assert errors == [f'error: cannot write {path}: No space left on device'], out.stderr[-3000:]
  assert full_disk.files_under(out_dir) == [path.name] and path.read_text() == 'earlier'


def test_eval_verdict_exit_status_says_whether_the_bar_is_met(tmp_path):
  task = lambda mean, sem: {'episodes': 30, 'return': {'mean': mean, 'sem': sem}}
  for name, pong in (('run', task(-14.0, 0.5)), ('low', task(-16.0, 0.5)),
                     ('uniform', task(-20.2, 0.2))):
    (tmp_path / f'{name}.json').write_text(json.dumps({'tasks': {'Pong': pong}}))
  args = [f'--uniform={tmp_path / "uniform.json"}', '--threshold=Pong=-15']
  out = _tool('eval_verdict.py', str(tmp_path / 'run.json'), *args)
  assert out.returncode == 0 and out.stdout.strip().endswith('the bar is met'), out.stderr
  out = _tool('eval_verdict.py', str(tmp_path / 'low.json'), *args,
              f'--baseline={tmp_path / "run.json"}')
  assert out.returncode == 1 and out.stdout.strip().endswith('0 of 1 tasks pass'), out.stderr
  _one_line(_tool('eval_verdict.py', str(tmp_path / 'run.json'), '--threshold=Pong'),
            'error: --threshold=Pong: give TASK=RETURN, e.g. Pong=-15')
  _one_line(_tool('eval_verdict.py'), 'error: give one run (a run folder or an evaluation JSON)')
  out = _tool('eval_verdict.py', str(tmp_path / 'run.json'), '--threshold=Pnog=-15')
  _one_line(out, 'error: threshold for Pnog: not a task of the run (Pong)')
  # a bad flag value: one line and 2, not absl's FATAL and 1 (which says a task missed the bar)
  out = _tool('eval_verdict.py', str(tmp_path / 'run.json'), '--within=abc')
  assert out.returncode == 2 and 'Traceback' not in out.stderr, out.stderr
  assert out.stderr.strip().startswith('error: flag --within=abc: '), out.stderr
  out = _tool('eval_verdict.py', str(tmp_path / 'nothing'))
  _one_line(out, f'error: {tmp_path / "nothing"}: no evaluation (eval/<step>.json; '
            'launch/evaluate.py makes one)')


LAUNCH_SCRIPTS = sorted(f for f in os.listdir(os.path.join(ROOT, 'launch'))
                        if f.endswith('.py') and f != '__init__.py')


@pytest.mark.parametrize('script', LAUNCH_SCRIPTS)
def test_every_command_without_its_flags_says_so_in_one_line(script):
  # Before: absl's usage text with exit status 1 (compare_filters, benchmark,
  # evaluate_peer), or two lines for two missing flags (infra/cli.py).
  out = _tool(script)
  assert out.returncode == 2 and 'Traceback' not in out.stderr, out.stderr
  lines = out.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: '), out.stderr
  assert 'USAGE' not in out.stdout + out.stderr


@pytest.mark.parametrize('script, args, line', [
    ('compare_filters.py', ['--runs=a'], 'error: --runs needs two or more run folders'),
    ('benchmark.py', ['--suite=gpu', '--config=configs/cartpole.py'],
     'error: give --suite or --config, not both'),
    ('evaluate_peer.py', ['--workdir=a', '--model_tar=b', 'extra'],
     "error: unexpected arguments: ['extra']"),
])
def test_a_missing_or_contradictory_flag_is_one_line(script, args, line):
  _one_line(_tool(script, *args), line)
