"""One run's evaluation against another's and against uniform play, per task,
in combined standard errors: a gap is (mean_a - mean_b) / sqrt(se_a^2 + se_b^2).
`launch/eval_verdict.py` is the command line.
"""

import dataclasses
import json
import math
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from analysis import run_table


@dataclasses.dataclass(frozen=True)
class Score:
  """One task's evaluation: the mean return, its standard error and the games."""
  mean: float
  sem: float
  episodes: int


@dataclasses.dataclass(frozen=True)
class Bar:
  """What a task must show to pass; None: not asked.

  above_uniform: the run's mean at least this many combined s.e. above uniform play's.
  within: the run ahead of the baseline, or behind by at most this many combined s.e.
  thresholds: task -> the return the run's mean must reach.
  """
  above_uniform: Optional[float] = 2.0
  within: Optional[float] = 1.0
  thresholds: Mapping[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class TaskVerdict:
  task: str
  run: Score
  baseline: Optional[Score]
  uniform: Optional[Score]
  vs_uniform: Optional[float]    # (run - uniform) / combined s.e.
  vs_baseline: Optional[float]   # (run - baseline) / combined s.e.
  checks: Tuple[Tuple[str, bool], ...]   # (what was asked, passed)

  @property
  def passed(self) -> bool:
    return all(ok for _, ok in self.checks)


def scores(record: Mapping, source: str = 'the evaluation') -> Dict[str, Score]:
  """Each task's Score from an evaluation record (eval/<step>.json, as
  launch/evaluate.py writes it).

  Raises:
    ValueError: naming `source` and the task, when the record has no tasks or a
      task lacks its return's mean, episode count or standard error (one game).
  """
  tasks = record.get('tasks') if isinstance(record, Mapping) else None
  if not isinstance(tasks, Mapping) or not tasks:
    raise ValueError(f'{source} is not an evaluation record (launch/evaluate.py): no tasks')
  out = {}
  for task, entry in tasks.items():
    try:
      r = entry['return']
      mean, sem, episodes = float(r['mean']), r.get('sem'), int(entry['episodes'])
    except (KeyError, TypeError, ValueError, AttributeError):
      raise ValueError(f"{source}: task {task} has no return mean and episode count") from None
    if sem is None:
      raise ValueError(f'{source}: task {task} has no standard error ({episodes} game(s)); '
                       'evaluate at least 2 games')
    out[task] = Score(mean, float(sem), episodes)
  return out


def gap(a: Score, b: Score) -> float:
  """(a - b) in combined standard errors; +-inf where both are exact."""
  se = math.hypot(a.sem, b.sem)
  if se == 0:
    return 0.0 if a.mean == b.mean else math.copysign(math.inf, a.mean - b.mean)
  return (a.mean - b.mean) / se


def verdicts(run: Mapping[str, Score], bar: Bar, baseline: Optional[Mapping[str, Score]] = None,
             uniform: Optional[Mapping[str, Score]] = None) -> List[TaskVerdict]:
  """One TaskVerdict per task of `run`, in its order.

  Raises:
    ValueError: naming the task, when a compared evaluation lacks a task of the
      run, or a threshold names a task the run lacks.
  """
  unknown = sorted(set(bar.thresholds) - set(run))
  if unknown:
    raise ValueError(f'threshold for {", ".join(unknown)}: not a task of the run '
                     f'({", ".join(run)})')
  out = []
  for task, score in run.items():
    checks = []
    vs_u = vs_b = None
    u = b = None
    if uniform is not None:
      if task not in uniform:
        raise ValueError(f'{task}: not in the uniform-play evaluation ({", ".join(uniform)})')
      u = uniform[task]
      vs_u = gap(score, u)
      if bar.above_uniform is not None:
        checks.append((f'>= {bar.above_uniform:g} s.e. above uniform', vs_u >= bar.above_uniform))
    if baseline is not None:
      if task not in baseline:
        raise ValueError(f'{task}: not in the baseline evaluation ({", ".join(baseline)})')
      b = baseline[task]
      vs_b = gap(score, b)
      if bar.within is not None:
        checks.append((f'>= baseline - {bar.within:g} s.e.', vs_b >= -bar.within))
    if task in bar.thresholds:
      checks.append((f'>= {bar.thresholds[task]:g}', score.mean >= bar.thresholds[task]))
    out.append(TaskVerdict(task, score, b, u, vs_u, vs_b, tuple(checks)))
  return out


def _cell(s: Optional[Score]) -> str:
  if s is None:
    return '-'
  return run_table.score({'return': {'mean': s.mean, 'sem': s.sem}, 'episodes': s.episodes})


def _gap(x: Optional[float]) -> str:
  return '-' if x is None else f'{x:+.2f}'


def markdown(rows: Sequence[TaskVerdict], labels: Tuple[str, str] = ('run', 'baseline')) -> str:
  """The verdicts as a markdown table and a last line saying how many passed."""
  header = ('task', labels[0], labels[1], 'uniform play', 's.e. above uniform',
            f's.e. against {labels[1]}', 'checks')
  lines = ['| ' + ' | '.join(header) + ' |', '|' + ' --- |' * len(header)]
  for v in rows:
    checks = '; '.join(f'{what}: {"yes" if ok else "NO"}' for what, ok in v.checks) or '-'
    lines.append('| ' + ' | '.join([v.task, _cell(v.run), _cell(v.baseline), _cell(v.uniform),
                                     _gap(v.vs_uniform), _gap(v.vs_baseline), checks]) + ' |')
  passed = sum(v.passed for v in rows)
  lines.append('')
  lines.append(f'{passed} of {len(rows)} tasks pass' + ('' if passed < len(rows) else ': the bar is met'))
  return '\n'.join(lines)


def load(path: str) -> Dict[str, Score]:
  """Scores from a run folder's newest evaluation or an evaluation JSON file;
  ValueError naming `path` when it holds no evaluation or cannot be read."""
  try:
    if path.endswith('.json'):
      with open(path) as f:
        record = json.load(f)
    else:
      record = run_table.latest_evaluation(path)
  except (OSError, ValueError) as e:
    raise ValueError(f'cannot read {getattr(e, "filename", None) or path} '
                     f'({getattr(e, "strerror", None) or e})') from None
  if record is None:
    raise ValueError(f'{path}: no evaluation (eval/<step>.json; launch/evaluate.py makes one)')
  return scores(record, path)
