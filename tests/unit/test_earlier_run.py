"""rundir/earlier_run.py: an earlier run's files moved out of a new run's way."""

import json

from rundir import earlier_run


def _earlier(folder):
  folder.mkdir()
  (folder / 'config.json').write_text('{"seed": 1}')
  (folder / 'metrics.jsonl').write_text(
      '{"env_steps": 100}\n{"env_steps": 300}\nnot json\n{"env_steps": 200}\n{"x": 1}\n')
  (folder / 'wandb_run_id.txt').write_text('abc')
  (folder / 'events.out.tfevents.1.host').write_bytes(b'tb')
  (folder / 'eval').mkdir()
  (folder / 'eval' / '300.json').write_text('{}')
  (folder / 'checkpoints').mkdir()
  (folder / 'run.lock').write_text('')
  (folder / 'notes.txt').write_text('mine')
  (folder / 'process_1.log').write_text('this run')   # written before the folder is adopted
  (folder / 'nle').mkdir()


def test_set_aside_moves_only_what_a_run_writes(tmp_path):
  run = tmp_path / 'run'
  _earlier(run)
  aside, names, last = earlier_run.set_aside(str(run))
  assert aside == str(run / 'earlier_run.1')
  assert names == ['config.json', 'eval', 'events.out.tfevents.1.host', 'metrics.jsonl',
                   'wandb_run_id.txt']
  assert last == 300   # the largest env step; lines that are not rows skipped
  assert sorted(p.name for p in run.iterdir()) == ['checkpoints', 'earlier_run.1', 'nle',
                                                   'notes.txt', 'process_1.log', 'run.lock']
  assert json.loads((run / 'earlier_run.1' / 'config.json').read_text()) == {'seed': 1}
  assert (run / 'earlier_run.1' / 'eval' / '300.json').exists()


def test_a_second_earlier_run_gets_the_next_folder(tmp_path):
  run = tmp_path / 'run'
  _earlier(run)
  earlier_run.set_aside(str(run))
  (run / 'metrics.jsonl').write_text('')
  aside, names, last = earlier_run.set_aside(str(run))
  assert aside == str(run / 'earlier_run.2') and names == ['metrics.jsonl'] and last is None


def test_nothing_to_move_is_none(tmp_path):
  assert earlier_run.set_aside(str(tmp_path)) is None
  assert earlier_run.set_aside(str(tmp_path / 'missing')) is None
  (tmp_path / 'checkpoints').mkdir()
  (tmp_path / 'run.lock').write_text('')
  assert earlier_run.set_aside(str(tmp_path)) is None
  assert sorted(p.name for p in tmp_path.iterdir()) == ['checkpoints', 'run.lock']


def test_describe_names_the_files_and_the_last_step(tmp_path):
  line = earlier_run.describe('w', ('w/earlier_run.1', ['config.json', 'metrics.jsonl'], 1234))
  assert line == ('w held an earlier run with no checkpoint to resume from (logged to env step '
                  '1,234); its 2 file(s) (config.json, metrics.jsonl) moved to w/earlier_run.1. '
                  'This run starts at env step 0 with a new wandb run id')
  assert '(no metrics rows)' in earlier_run.describe('w', ('w/earlier_run.1', ['config.json'], None))


def test_links_and_devices_under_a_run_files_name_stay(tmp_path):
  # A metrics.jsonl linked to /dev/full (tests/system/test_run_faults.py's
  # full disk) is no earlier run; reading it would never end.
  run = tmp_path / 'run'
  run.mkdir()
  (run / 'metrics.jsonl').symlink_to('/dev/full')
  (tmp_path / 'real.json').write_text('{}')
  (run / 'config.json').symlink_to(tmp_path / 'real.json')
  assert earlier_run.run_files(str(run)) == []
  assert earlier_run.last_env_step(str(run)) is None
  assert earlier_run.set_aside(str(run)) is None
  assert sorted(p.name for p in run.iterdir()) == ['config.json', 'metrics.jsonl']
