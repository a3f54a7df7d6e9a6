"""analysis/eval_verdict.py: one run's evaluation against a baseline and uniform
play, per task, in combined standard errors, against values worked out by hand."""

import json
import math

import pytest

from analysis import eval_verdict as ev

S = ev.Score


def test_gap_is_the_difference_over_the_combined_standard_error():
  # (10 - 4) / sqrt(3^2 + 4^2) = 6 / 5
  assert ev.gap(S(10.0, 3.0, 30), S(4.0, 4.0, 30)) == pytest.approx(1.2)
  assert ev.gap(S(4.0, 4.0, 30), S(10.0, 3.0, 30)) == pytest.approx(-1.2)
  # exact scores: level is 0, otherwise infinitely apart in the right direction
  assert ev.gap(S(1.0, 0.0, 1), S(1.0, 0.0, 1)) == 0.0
  assert ev.gap(S(2.0, 0.0, 1), S(1.0, 0.0, 1)) == math.inf
  assert ev.gap(S(0.0, 0.0, 1), S(1.0, 0.0, 1)) == -math.inf


def test_the_six_game_bar_by_hand():
  run = {'Carnival': S(3019.0, 183.0, 30), 'NameThisGame': S(3301.0, 165.0, 30),
         'Pong': S(-14.0, 0.6, 30), 'SpaceInvaders': S(200.0, 30.0, 30)}
  clipped = {'Carnival': S(909.0, 55.0, 30), 'NameThisGame': S(3500.0, 200.0, 30),
             'Pong': S(-16.2, 0.8, 30), 'SpaceInvaders': S(160.0, 40.0, 30)}
  uniform = {'Carnival': S(730.0, 60.0, 30), 'NameThisGame': S(2228.0, 159.0, 30),
             'Pong': S(-20.2, 0.18, 30), 'SpaceInvaders': S(148.0, 18.7, 30)}
  rows = ev.verdicts(run, ev.Bar(2.0, 1.0, {'Pong': -15.0}), clipped, uniform)
  by_task = {v.task: v for v in rows}

  # Carnival: (3019 - 730) / hypot(183, 60) = 2289 / 192.58 = 11.89 above uniform;
  # (3019 - 909) / hypot(183, 55) = 2110 / 191.09 = 11.04 ahead of clipped
  c = by_task['Carnival']
  assert c.vs_uniform == pytest.approx(2289 / math.sqrt(183 ** 2 + 60 ** 2))
  assert c.vs_baseline == pytest.approx(2110 / math.sqrt(183 ** 2 + 55 ** 2))
  assert c.passed
  # NameThisGame: (3301 - 3500) / hypot(165, 200) = -199 / 259.3 = -0.77: behind, but within 1 s.e.
  n = by_task['NameThisGame']
  assert n.vs_baseline == pytest.approx(-199 / math.sqrt(165 ** 2 + 200 ** 2))
  assert n.vs_baseline > -1 and n.passed
  # Pong: (-14 + 20.2) / hypot(0.6, 0.18) = 6.2 / 0.6264 = 9.9 above uniform; -14 >= -15
  p = by_task['Pong']
  assert p.vs_uniform == pytest.approx(6.2 / math.sqrt(0.36 + 0.0324))
  assert dict(p.checks)['>= -15'] and p.passed
  # SpaceInvaders: (200 - 148) / hypot(30, 18.7) = 52 / 35.35 = 1.47 above uniform: < 2, fails
  s = by_task['SpaceInvaders']
  assert s.vs_uniform == pytest.approx(52 / math.sqrt(30 ** 2 + 18.7 ** 2))
  assert not s.passed
  assert [what for what, ok in s.checks if not ok] == ['>= 2 s.e. above uniform']

  table = ev.markdown(rows, ('PopArt', 'clipped')).splitlines()
  assert table[0].startswith('| task | PopArt | clipped | uniform play |')
  assert table[2].startswith('| Carnival | 3,019 +- 183 (30) | 909 +- 55.0 (30) | 730 +- 60.0 (30) | '
                             '+11.89 | +11.04 |')
  assert table[-1] == '3 of 4 tasks pass'


def test_a_threshold_missed_and_the_bar_met():
  run = {'Pong': S(-15.5, 0.5, 30)}
  (v,) = ev.verdicts(run, ev.Bar(None, None, {'Pong': -15.0}))
  assert v.checks == (('>= -15', False),) and not v.passed
  (v,) = ev.verdicts({'Pong': S(-15.0, 0.5, 30)}, ev.Bar(None, None, {'Pong': -15.0}))
  assert v.passed
  assert ev.markdown([v]).splitlines()[-1] == '1 of 1 tasks pass: the bar is met'


def test_comparisons_only_where_their_input_is_given():
  (v,) = ev.verdicts({'Pong': S(-15.0, 0.5, 30)}, ev.Bar())
  assert v.checks == () and v.vs_uniform is None and v.vs_baseline is None and v.passed


def test_missing_tasks_are_named():
  run = {'Pong': S(-15.0, 0.5, 30), 'Carnival': S(900.0, 50.0, 30)}
  with pytest.raises(ValueError, match='Carnival: not in the baseline evaluation'):
    ev.verdicts(run, ev.Bar(), baseline={'Pong': S(-16.0, 0.5, 30)})
  with pytest.raises(ValueError, match='Carnival: not in the uniform-play evaluation'):
    ev.verdicts(run, ev.Bar(), uniform={'Pong': S(-20.0, 0.5, 30)})
  with pytest.raises(ValueError, match='threshold for Pnog: not a task of the run'):
    ev.verdicts(run, ev.Bar(thresholds={'Pnog': -15.0}))


def test_load_reads_a_run_folders_newest_evaluation_or_a_file(tmp_path):
  task = lambda mean, sem: {'episodes': 30, 'return': {'mean': mean, 'sem': sem}}
  (tmp_path / 'eval').mkdir()
  (tmp_path / 'eval' / '100.json').write_text(json.dumps({'tasks': {'Pong': task(-20.0, 0.2)}}))
  (tmp_path / 'eval' / '200.json').write_text(json.dumps({'tasks': {'Pong': task(-14.0, 0.5)}}))
  (tmp_path / 'eval' / '200_uniform.json').write_text(json.dumps({'tasks': {'Pong': task(-20.3, 0.2)}}))
  assert ev.load(str(tmp_path)) == {'Pong': S(-14.0, 0.5, 30)}
  assert ev.load(str(tmp_path / 'eval' / '200_uniform.json')) == {'Pong': S(-20.3, 0.2, 30)}
  with pytest.raises(ValueError, match='no evaluation'):
    ev.load(str(tmp_path / 'eval'))
  (tmp_path / 'x.json').write_text('[]')
  with pytest.raises(ValueError, match='not an evaluation record'):
    ev.load(str(tmp_path / 'x.json'))
  with pytest.raises(ValueError, match='cannot read'):
    ev.load(str(tmp_path / 'missing.json'))


def test_records_that_cannot_be_judged_are_named():
  with pytest.raises(ValueError, match='e.json is not an evaluation record .*no tasks'):
    ev.scores({'tasks': {}}, 'e.json')   # nothing to judge is not a pass
  # one game: no standard error, so no comparison in standard errors
  one = {'tasks': {'Pong': {'episodes': 1, 'return': {'mean': -20.0, 'sem': None}}}}
  with pytest.raises(ValueError, match=r'e.json: task Pong has no standard error \(1 game'):
    ev.scores(one, 'e.json')
  for entry in ({'episodes': 30}, {'return': {'mean': 1.0, 'sem': 0.1}}, 'text',
                {'episodes': 30, 'return': {'sem': 0.1}}):
    with pytest.raises(ValueError, match='e.json: task Pong has no return mean and episode count'):
      ev.scores({'tasks': {'Pong': entry}}, 'e.json')


def test_a_damaged_evaluation_in_a_run_folder_is_named(tmp_path):
  (tmp_path / 'eval').mkdir()
  (tmp_path / 'eval' / '100.json').write_text('{not json')
  with pytest.raises(ValueError, match=f'cannot read {tmp_path}'):
    ev.load(str(tmp_path))
