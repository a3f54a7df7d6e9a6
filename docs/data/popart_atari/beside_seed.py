"""Our multi-task PopArt Pong curves beside the seed's (issue [21], item 4).

The seed's curves (aluscher/torchbeastpopart,
results/figures/fig_mean_episode_return.png) exist only as a figure; the
points drawn here are read from it by eye (../shared/REFERENCES.md): its
multi-task PopArt Pong stays at -21 until about 2M agent steps per game, is
about -13 at 2.5M, +5 to +10 at 3-4M and 21 from about 7M; its clipped
Pong leaves -21 at about 0.8-1M and is about 0 to +7 by 1.2-2M. Ours:
training returns over the last 100k agent steps per game.

  python docs/data/popart_atari/beside_seed.py   # writes docs/popart_pong_beside_seed.png
"""

import os

import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

from analysis import run_metrics, run_plots  # pylint: disable=g-import-not-at-top

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))

D = os.path.join(ROOT, 'docs', 'data', 'popart_atari')
OURS = (  # (folder, label, colour, line style)
    ('pc_default', 'ours: PopArt default, two games', 'tab:blue', '-'),
    ('pc_default_s1', 'ours: PopArt default, two games, seed 1', 'tab:blue', '--'),
    ('pc_a2t_lr5e4', 'ours: PopArt a2t at 5e-4, two games', 'tab:green', '-'),
    ('pc_a2t_lr5e4_s1', 'ours: PopArt a2t at 5e-4, two games, seed 1', 'tab:green', '--'),
    ('pc_popart', 'ours: PopArt before [21] (slow_start), two games', 'tab:gray', '-'),
    ('six_a2t_mb3b_lr5e4_warmup_end05', 'ours: PopArt default settings, six games', 'tab:purple', '-'),
)
# The seed's curves, read by eye: (agent steps per game, Pong return).
SEED_POPART = ((0, -21), (2.0e6, -21), (2.5e6, -13), (3.0e6, 5), (4.0e6, 10), (7.0e6, 21))
SEED_CLIPPED = ((0, -21), (0.9e6, -21), (1.2e6, 0), (2.0e6, 7))


def main():
  fig, ax = plt.subplots(figsize=(9, 5))
  for folder, label, colour, style in OURS:
    run = run_plots.per_task_steps(run_metrics.load_metrics(os.path.join(D, folder)))
    steps, returns = run_plots.smoothed_returns(run, 'Pong', 100_000)
    ax.plot(steps, returns, color=colour, linestyle=style, label=label)
  for points, label, colour in ((SEED_POPART, "the seed's PopArt (read by eye)", 'tab:red'),
                                (SEED_CLIPPED, "the seed's clipped (read by eye)", 'tab:orange')):
    ax.plot(*zip(*points), color=colour, linestyle=':', marker='o', label=label)
  ax.axhline(-15, color='k', linewidth=0.5)
  ax.set_xlim(0, 4e6)
  ax.set_xlabel('agent steps per game')
  ax.set_ylabel('Pong return')
  ax.set_title('Multi-task PopArt on Pong: ours beside the seed\'s')
  ax.legend(fontsize=7, loc='upper left')
  fig.tight_layout()
  fig.savefig(os.path.join(ROOT, 'docs', 'popart_pong_beside_seed.png'), dpi=100)


if __name__ == '__main__':
  main()
