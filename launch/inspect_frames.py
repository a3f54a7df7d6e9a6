"""Checks, with numbers, the frames and step bookkeeping the learner receives.

  python launch/inspect_frames.py --config=configs/atari_single.py:game=Pong --output=docs/pong_frames.png
  python launch/inspect_frames.py --config=configs/cartpole.py --steps=200 --output=

Runs actor 0 of the config as training would, prints the PASS/FAIL table
of analysis/frame_checks.py and, for frames, saves the network's inputs
around the first point scored in env 0. Exits 1 if a check fails.
"""

import os
from typing import Dict

from absl import app
from absl import flags
import numpy as np

from configs import command_line   # defines --config; its file's mistakes are one line
from configs.validation import ConfigError, validate_spec
from envs import atari
from infra import atomic_write
from infra import cli
from analysis.frame_checks import (Check, check_behaviour_logits, check_env_record,
                                   check_pong_games, check_protocol, check_unrolls,
                                   reward_summary, torso_input)
from analysis.frame_collect import Collected, collect, stitch

_CONFIG = _OUTPUT = _STEPS = _LOGIT_UNROLLS = None


def _define_flags():
  """The script's own flags, defined only when it runs as a script (--config
  is configs/command_line's)."""
  global _CONFIG, _OUTPUT, _STEPS, _LOGIT_UNROLLS
  _CONFIG = command_line.CONFIG
  _OUTPUT = flags.DEFINE_string('output', 'docs/pong_frames.png', "PNG of the frames; '' = none.")
  _STEPS = flags.DEFINE_integer('steps', 1200, 'Agent steps per env to collect (whole unrolls); '
                                'a random Pong game lasts ~800-900.')
  _LOGIT_UNROLLS = flags.DEFINE_integer('logit_unrolls', 4, 'Unrolls whose behaviour logits '
                                        'are recomputed with the network.')


def save_strip(path: str, collected: Collected) -> int:
  """Rows t-3..t+2 around env 0's first point (reward at t), columns the 4
  stacked channels and conv1's input (newest channel). Returns t."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  seq = stitch(collected.unrolls)
  hits = [t for t in np.flatnonzero(seq['reward'][:, 0]) if 3 <= t < len(seq['reward']) - 2]
  if not hits:
    raise app.UsageError('no point scored in env 0 away from the ends; raise --steps')
  t = int(hits[0])
  obs = {k: seq[k][t - 3:t + 3, :1] for k in collected.unrolls[0].obs}
  scaled = torso_input(collected.network, collected.variables, obs)
  fig, axes = plt.subplots(6, 5, figsize=(12.5, 16))
  for i, s in enumerate(range(t - 3, t + 3)):
    images = [(seq['frames'][s, 0, c], 255) for c in range(4)] + [(scaled[i, :, :, 3], 1.0)]
    for c, (image, vmax) in enumerate(images):
      axes[i, c].imshow(image, cmap='gray', vmin=0, vmax=vmax, interpolation='nearest')
      axes[i, c].set_xticks([]), axes[i, c].set_yticks([])
    for c, name in enumerate(('channel 0 (oldest)', 'channel 1', 'channel 2',
                              'channel 3 (newest)')):
      axes[0, c].set_title(name)
    axes[i, 4].set_title(('conv1 input /255, newest\n' if i == 0 else '')
                         + f'range [{scaled[i].min():.2f}, {scaled[i].max():.2f}]', fontsize=9)
    axes[i, 0].set_ylabel(f't{s - t:+d} (step {s})\nreward={seq["reward"][s, 0]:+.0f} '
                          f'first={bool(seq["first"][s, 0])}\ndiscount={seq["discount"][s, 0]:.0f} '
                          f'action={seq["action"][s, 0]}', fontsize=9)
  fig.suptitle(f'Env 0: the learner\'s inputs around step t={t}, where reward '
               f'{seq["reward"][t, 0]:+.0f} follows a_t (the score changes in x_t+1)', fontsize=12)
  fig.tight_layout()
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  with atomic_write.atomic_path(path) as tmp:   # whole or not at all
    fig.savefig(tmp, dpi=80)
  plt.close(fig)
  return t


def print_table(checks: Dict[str, Check]) -> bool:
  width = max(len(c.what) for c in checks.values())
  for c in checks.values():
    print(f'{"PASS" if c.passed else "FAIL"}  {c.what:<{width}}  {c.detail}')
  return all(c.passed for c in checks.values())


def main(argv):
  del argv
  try:
    spec = validate_spec(command_line.load_config())
  except ConfigError as e:
    cli.fail(str(e))
  plan, unroll_length = spec.plan, spec.run.unroll_length
  num_blocks = max(2, -(-_STEPS.value // unroll_length))
  print(f'collecting {num_blocks} unrolls (T={unroll_length}) from actor 0, '
        f'{sum(g.num_envs for g in plan.actor_env_groups[0])} envs ...', flush=True)
  collected = collect(spec, num_blocks)
  checks = check_unrolls(collected.unrolls)
  checks.update(check_env_record(collected))
  checks.update(check_behaviour_logits(collected, _LOGIT_UNROLLS.value))
  games = [atari.game_of(t['env_id']) for t in spec.run.tasks]
  if games[0] is not None:
    checks.update(check_protocol(spec, collected))
  if games == ['Pong']:
    checks.update(check_pong_games(collected))
  ok = print_table(checks)
  print(reward_summary(stitch(collected.unrolls)))
  if _OUTPUT.value and 'frames' in collected.unrolls[0].obs:
    try:
      t = save_strip(_OUTPUT.value, collected)
    except OSError as e:   # a full disk, a folder that cannot be made: one line
      cli.fail(f'cannot write {_OUTPUT.value}: {e.strerror or e}')
    print(f'wrote {_OUTPUT.value}: env 0, steps {t - 3}..{t + 2}, reward at {t}')
  print('ALL CHECKS PASS' if ok else 'SOME CHECKS FAIL')
  return 0 if ok else 1


if __name__ == '__main__':
  _define_flags()
  flags.mark_flag_as_required('config')
  cli.run(main, command_line.parse_flags)
