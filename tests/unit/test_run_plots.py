"""analysis/run_plots.py (and the launch/plot_runs.py command): the episode-weighted smoothed return, its first
crossing of a threshold, and the figure."""

import json

import numpy as np

from analysis import run_metrics
from analysis import run_plots


def _run():
  records = [
      {'env_steps': 100, 'episode_return/Pong': -21.0, 'episodes/Pong': 3, 'entropy': 1.7, 'sps': 5.0},
      {'env_steps': 200, 'entropy': 1.6, 'sps': 5.0},   # no game ended in this window
      {'env_steps': 300, 'episode_return/Pong': -15.0, 'episodes/Pong': 1, 'entropy': 1.5, 'sps': 5.0},
      {'env_steps': 400, 'episode_return/Pong': -13.0, 'episodes/Pong': 1, 'entropy': 1.4, 'sps': 5.0},
  ]
  return run_metrics.Run('r', records, {'tasks': [{'name': 'Pong'}]})


def test_smoothed_returns_weight_every_game_once():
  steps, values = run_plots.smoothed_returns(_run(), 'Pong', window=250)
  np.testing.assert_array_equal(steps, [100, 300, 400])
  # 300: games ending in (50, 300]: three at -21 and one at -15 -> -19.5
  # 400: (150, 400]: -15 and -13 -> -14
  np.testing.assert_allclose(values, [-21.0, -19.5, -14.0])
  assert run_plots.first_crossing(steps, values, -15.7) == 400
  assert run_plots.first_crossing(steps, values, 0.0) is None


def test_plot_writes_a_png(tmp_path):
  out = tmp_path / 'c.png'
  tasks = run_plots.plot([_run(), _run()], ['a', 'b'], str(out), 250, -20.7, -15.7, 'title',
                         references=run_plots.PONG_REFERENCES)
  assert tasks == ['Pong'] and out.stat().st_size > 1000


def test_plot_draws_any_metric_panels(tmp_path):
  run = _run()
  for i, r in enumerate(run.records):
    r.update({'dead/conv1': 0.1 * i, 'kl_update': 1e-3 * i, 'policy/logit_std': 0.2 * i})
  out = tmp_path / 'h.png'
  run_plots.plot([run], ['a'], str(out), 250,
                 panels=('entropy', 'policy/logit_std', 'kl_update', 'dead/conv1', 'sps'))
  assert out.stat().st_size > 1000
  for i, r in enumerate(run.records):
    r.update({'popart/mu/Pong': -0.5 + 0.1 * i, 'popart/sigma/Pong': 0.3 + 0.1 * i})
  run_plots.plot([run, run], ['a', 'b'], str(out), 250, panels=('popart/mu/*', 'popart/sigma/*'))
  assert out.stat().st_size > 1000


def test_references_are_ordered_ranges():
  for name, levels in run_plots.REFERENCES['pong+nature_cnn'].items():
    assert sorted(levels) == [-15, 0, 18], name
    lows = [levels[k][0] for k in sorted(levels)]
    assert all(lo <= hi for lo, hi in levels.values()) and lows == sorted(lows), name


def test_a_resumed_runs_metrics_drop_the_stretch_it_did_not_continue(tmp_path):
  """Killed at 400 steps, resumed from the checkpoint at 200: the first
  process's records after 200 are superseded, and `time` goes on from 200's."""
  lines = [
      {'env_steps': 100, 'time': 10.0}, {'env_steps': 200, 'time': 20.0},
      {'env_steps': 300, 'time': 30.0}, {'env_steps': 400, 'time': 40.0},
      {'env_steps': 250, 'time': 4.0}, {'env_steps': 350, 'time': 9.0},
  ]
  (tmp_path / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in lines))
  run = run_metrics.load_metrics(str(tmp_path))
  assert [r['env_steps'] for r in run.records] == [100, 200, 250, 350]
  assert [r['time'] for r in run.records] == [10.0, 20.0, 24.0, 29.0]
  assert [r.get('process_time') for r in run.records] == [None, None, 4.0, 9.0]


def test_a_resumed_runs_clock_goes_on_where_its_rows_past_the_checkpoint_were_set_aside(tmp_path):
  """launch/train.py moves the rows past the restored checkpoint to a side
  file, so env_steps never go back: the new process shows only by its clock
  starting again, and `time` still goes on from the last kept record's."""
  lines = [
      {'env_steps': 100, 'time': 10.0}, {'env_steps': 200, 'time': 20.0},
      {'env_steps': 250, 'time': 4.0}, {'env_steps': 350, 'time': 9.0},
      {'env_steps': 400, 'time': 2.0},   # and resumed once more
  ]
  (tmp_path / 'metrics.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in lines))
  run = run_metrics.load_metrics(str(tmp_path))
  assert [r['env_steps'] for r in run.records] == [100, 200, 250, 350, 400]
  assert [r['time'] for r in run.records] == [10.0, 20.0, 24.0, 29.0, 31.0]
  assert [r.get('process_time') for r in run.records] == [None, None, 4.0, 9.0, 2.0]


def test_an_archived_runs_gzipped_metrics_load_as_the_folder_would(tmp_path):
  import gzip
  lines = [{'env_steps': 100, 'episode_return/Pong': -21.0}, {'env_steps': 200, 'episode_return/Pong': -20.0}]
  with gzip.open(tmp_path / 'metrics.jsonl.gz', 'wt') as f:
    f.writelines(json.dumps(r) + '\n' for r in lines)
  (tmp_path / 'config.json').write_text(json.dumps({'tasks': [{'name': 'Pong'}]}))
  run = run_metrics.load_metrics(str(tmp_path))
  assert run.records == lines and run.task_names == ['Pong']
  (tmp_path / 'metrics.jsonl.gz').unlink()
  try:
    run_metrics.load_metrics(str(tmp_path))
  except FileNotFoundError as e:
    assert 'has no metrics.jsonl' in str(e)
  else:
    raise AssertionError('a folder without metrics loaded')


def test_per_task_steps_put_a_multi_task_run_on_each_games_budget(tmp_path):
  records = [{'env_steps': 200, 'episode_return/Pong': -21.0, 'episodes/Pong': 1,
              'episode_return/Carnival': 700.0, 'episodes/Carnival': 2},
             {'env_steps': 600, 'episode_return/Pong': -19.0, 'episodes/Pong': 1}]
  run = run_metrics.Run('two', records, {'tasks': [{'name': 'Pong'}, {'name': 'Carnival'}]})
  per_task = run_plots.per_task_steps(run)
  assert [r['env_steps'] for r in per_task.records] == [100, 300]
  assert [r['env_steps'] for r in run.records] == [200, 600]   # the run itself is untouched
  steps, values = run_plots.smoothed_returns(per_task, 'Pong', window=150)
  np.testing.assert_allclose(steps, [100, 300])
  np.testing.assert_allclose(values, [-21.0, -19.0])
  out = tmp_path / 'two.png'
  tasks = run_plots.plot([per_task, _run()], ['two', 'one'], str(out), 150,
                         uniform={'Pong': -20.2, 'Carnival': 770.0}, xlabel='agent steps per task')
  assert tasks == ['Carnival', 'Pong'] and out.stat().st_size > 1000


def test_uniform_scores_parse_per_task_and_name_a_bad_item():
  assert run_plots.parse_uniform(['Pong=-20.2', 'Carnival=770']) == {'Pong': -20.2, 'Carnival': 770.0}
  for bad in ('Pong', 'Pong=high', '=3'):
    try:
      run_plots.parse_uniform([bad])
    except ValueError as e:
      assert bad in str(e) and '<task>=<return>' in str(e)
    else:
      raise AssertionError(bad)


def test_rolling_mean_by_hand():
  x = np.arange(5.0)
  _, y = run_plots.rolling_mean(x, np.asarray([1.0, 3.0, 5.0, 7.0, 9.0]), 3)
  np.testing.assert_allclose(y, [1.0, 2.0, 3.0, 5.0, 7.0])
  np.testing.assert_allclose(run_plots.rolling_mean(x, x, 1)[1], x)
