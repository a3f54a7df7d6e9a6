"""A run's evaluation against a baseline run's and uniform play, per task, in
combined standard errors (sqrt(se_a^2 + se_b^2)), and whether each passes.

  python launch/eval_verdict.py docs/data/popart_atari/six_popart \\
      --baseline=docs/data/popart_atari/six_clipped_lr5e4 --threshold=Pong=-15

Each run argument is a run folder (its newest eval/<step>.json) or an evaluation JSON. Checks, where
their input is given: at least --above_uniform s.e. above uniform play, at most --within s.e. behind
the baseline, at least each --threshold. Exit status 0 when every task passes, 1 when one does not,
2 on bad input.
"""

import sys

from absl import flags

from analysis import eval_verdict
from infra import cli

_BASELINE = flags.DEFINE_string('baseline', None, 'The run (folder or evaluation JSON) to '
                                'compare with.')
_UNIFORM = flags.DEFINE_string('uniform', None, "Uniform play's evaluation JSON "
                               '(eval/<step>_uniform.json).')
_ABOVE = flags.DEFINE_float('above_uniform', 2.0, 'Combined s.e. above uniform play each task '
                            'must be; negative: not checked.')
_WITHIN = flags.DEFINE_float('within', 1.0, 'Combined s.e. the run may trail the baseline by; '
                             'negative: not checked.')
_THRESHOLD = flags.DEFINE_multi_string('threshold', [], 'TASK=RETURN the run must reach '
                                       '(repeatable), e.g. Pong=-15.')
_LABELS = flags.DEFINE_list('labels', None, 'Labels of the run and the baseline.')


def _thresholds(items):
  out = {}
  for item in items:
    task, sep, value = item.partition('=')
    try:
      out[task] = float(value)
    except ValueError:
      sep = ''
    if not sep or not task:
      raise ValueError(f'--threshold={item}: give TASK=RETURN, e.g. Pong=-15')
  return out


def main(argv):
  labels = _LABELS.value or ['run', 'baseline']
  try:
    if len(argv) != 2:
      raise ValueError('give one run (a run folder or an evaluation JSON)')
    if len(labels) != 2:
      raise ValueError(f"--labels has {len(labels)} labels: give the run's and the baseline's")
    bar = eval_verdict.Bar(above_uniform=_ABOVE.value if _ABOVE.value >= 0 else None,
                           within=_WITHIN.value if _WITHIN.value >= 0 else None,
                           thresholds=_thresholds(_THRESHOLD.value))
    run = eval_verdict.load(argv[1])
    baseline = eval_verdict.load(_BASELINE.value) if _BASELINE.value else None
    uniform = eval_verdict.load(_UNIFORM.value) if _UNIFORM.value else None
    rows = eval_verdict.verdicts(run, bar, baseline, uniform)
  except ValueError as e:
    cli.fail(str(e))
  print(eval_verdict.markdown(rows, tuple(labels)))
  sys.exit(0 if all(v.passed for v in rows) else 1)


if __name__ == '__main__':
  cli.run(main)
