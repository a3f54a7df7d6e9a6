"""analysis/run_table.py: a finished run's row per task, from its metrics and evaluations."""

import json

import pytest

from analysis import run_table


def _write(path, obj):
  path.write_text(json.dumps(obj))


def test_rows_of_a_two_task_popart_run(tmp_path):
  records = [
      {'env_steps': 100_000, 'time': 60.0, 'episode_return/Pong': -21.0, 'episodes/Pong': 2,
       'popart/mu/Pong': 0.0, 'popart/sigma/Pong': 1.0, 'popart/mu/Carnival': 0.0,
       'popart/sigma/Carnival': 1.0},
      {'env_steps': 200_000, 'time': 120.0, 'episode_return/Pong': -15.0, 'episodes/Pong': 1,
       'episode_return/Carnival': 900.0, 'episodes/Carnival': 3,
       'popart/mu/Pong': -0.5, 'popart/sigma/Pong': 0.25, 'popart/mu/Carnival': 150.0,
       'popart/sigma/Carnival': 120.0},
  ]
  (tmp_path / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in records))
  _write(tmp_path / 'config.json', {'tasks': [{'name': 'Pong'}, {'name': 'Carnival'}]})
  (tmp_path / 'eval').mkdir()
  task = lambda mean, sem: {'episodes': 30, 'return': {'mean': mean, 'sem': sem}}
  _write(tmp_path / 'eval' / '100000.json', {'env_steps': 100_000, 'tasks': {'Pong': task(-21.0, 0.1)}})
  _write(tmp_path / 'eval' / '200000.json', {'env_steps': 200_000, 'tasks': {'Pong': task(-16.0, 0.5)}})
  _write(tmp_path / 'eval' / '200000.2.json',  # a second evaluation of the same step: the newest counts
         {'env_steps': 200_000, 'tasks': {'Pong': task(-14.0, 0.5), 'Carnival': task(1234.0, 56.0)}})
  _write(tmp_path / 'eval' / '200000_uniform.json',
         {'env_steps': 200_000, 'tasks': {'Pong': task(-20.2, 0.2)}})

  rows = run_table.run_rows(str(tmp_path), 'a', window=50_000)
  assert rows == [
      # 200k env steps over 2 tasks; 120 s; 200k / 120 s; Pong's games ending in the last
      # 50k steps per task (one at -15); mu and sigma of the last row
      ['a', 'Pong', '0.10M', '2 min', '1,667', '-14.0 +- 0.5 (30)', '-15.0', '-0.5 / 0.25'],
      ['a', 'Carnival', '0.10M', '2 min', '1,667', '1,234 +- 56.0 (30)', '900', '150 / 120'],
  ]
  assert run_table.uniform_rows(str(tmp_path / 'eval' / '200000_uniform.json')) == [
      ['uniform play', 'Pong', '-', '-', '-', '-20.2 +- 0.2 (30)', '-', '-']]
  table = run_table.markdown(rows).splitlines()
  assert table[0].startswith('| run | task |') and len(table) == 4
  # An evaluation before the end says where it was taken.
  (tmp_path / 'eval' / '200000.json').unlink()
  (tmp_path / 'eval' / '200000.2.json').unlink()
  assert run_table.run_rows(str(tmp_path), 'a', window=50_000)[0][5] == \
      '-21.0 +- 0.1 (30) at env step 100,000'
  # A run with PopArt off logs the unused statistics; the table leaves them out.
  _write(tmp_path / 'config.json', {'tasks': [{'name': 'Pong'}, {'name': 'Carnival'}],
                                    'popart': {'enabled': False}})
  assert [row[-1] for row in run_table.run_rows(str(tmp_path), 'c', window=50_000)] == ['-', '-']


def test_a_run_without_evaluations_or_popart_has_dashes(tmp_path):
  (tmp_path / 'metrics.jsonl').write_text(json.dumps({'env_steps': 10, 'time': 1.0}) + '\n')
  _write(tmp_path / 'config.json', {'tasks': [{'name': 'CartPole'}]})
  assert run_table.latest_evaluation(str(tmp_path)) is None
  assert run_table.run_rows(str(tmp_path), 'b', 100) == [
      ['b', 'CartPole', '0.00M', '0 min', '10', '-', '-', '-']]


def test_a_run_without_metrics_rows_is_named(tmp_path):
  (tmp_path / 'metrics.jsonl').write_text('')
  with pytest.raises(ValueError, match='has no metrics rows yet'):
    run_table.run_rows(str(tmp_path), 'r', 10)
