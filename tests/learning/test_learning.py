"""The agent learns: CartPole, and two CartPoles at reward scales 1 and 1000.

These train for real (about 20-40 s each on 2 cores). A task "reaches" a
score when the mean return of the episodes that ended in one log window
(2 s, at least 10 episodes) is at or above it before the step budget ends.
"""

import pytest

from configs import cartpole, cartpole_popart
from tests.support.training_runs import train_and_read

pytestmark = pytest.mark.learning


MIN_EPISODES = 10


def _best_window_returns(config, tmp_path):
  records = train_and_read(config, tmp_path)
  assert records[-1]['env_steps'] <= config.total_env_steps + config.batch_size * config.unroll_length
  best = {}
  for r in records:
    for k, v in r.items():
      if k.startswith('episode_return/'):
        task = k.split('/', 1)[1]
        if r[f'episodes/{task}'] >= MIN_EPISODES:
          best[task] = max(best.get(task, float('-inf')), v)
  return best, records


def test_cartpole_reaches_400_within_500k_steps(tmp_path):
  config = cartpole.get_config()
  assert config.total_env_steps == 500_000
  best, _ = _best_window_returns(config, tmp_path)
  assert best['CartPole'] >= 400, best


def test_popart_learns_both_reward_scales_within_1m_steps(tmp_path):
  config = cartpole_popart.get_config()
  assert config.total_env_steps == 1_000_000
  assert tuple(config.reward_scales) == (1.0, 1000.0)
  best, records = _best_window_returns(config, tmp_path)
  assert best['cartpole_a'] / 1.0 >= 300, best
  assert best['cartpole_b'] / 1000.0 >= 300, best
  # PopArt tracked the two scales apart: task b's sigma is far larger.
  last = records[-1]
  assert last['popart/sigma/cartpole_b'] > 100 * last['popart/sigma/cartpole_a']
