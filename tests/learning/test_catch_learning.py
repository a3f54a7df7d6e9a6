"""Catch-pixels learns: the a2c recipe from 40 x 40 pixels, and the V-trace
recipe on Pong's grey (envs/catch.pong_like) through the fused Nature CNN."""

import pytest

from configs import catch as catch_config
from tests.support.training_runs import train_and_read

pytestmark = pytest.mark.learning


# Learning: the a2c recipe on 40 x 40 frames, from random play (about -0.6).
# The recipe's TF-style RMSProp (nu from 1, epsilon 1e-5 inside the root, the
# loss averaged) keeps the policy at random for ~1,250 updates (~100k agent
# steps at 80 per update) while nu forgets its start; learning then takes
# ~20k steps. Measured twice (2 cores shared with other runs): the first 2 s
# window >= 0.8 came at 126k (200k budget) and 116k (250k budget). The budget
# is about twice that. The best window, not the last, is asserted: on 40 x 40
# frames the returns peak near 0.9 and then wander between about 0.5 and 0.9.
LEARNING_STEPS = 250_000


@pytest.mark.slow  # the full suite only, not the CI tier (docs/testing.md): about 3 min; V-trace from pixels stays in the CI tier (test_bf16_learning)
def test_a2c_learns_catch_from_pixels(tmp_path):
  config = catch_config.get_config('size=40')
  with config.unlocked():
    config.total_env_steps = LEARNING_STEPS
  records = train_and_read(config, tmp_path)
  returns = [r['episode_return/Catch'] for r in records
             if r.get('episodes/Catch', 0) >= 50]
  assert returns and min(returns) < 0.0, returns   # it started at random play (about -0.6)
  assert max(returns) >= 0.8, returns


# Learning on Pong's difficulties (envs/catch.pong_like: Pong's grey filling
# the frame, small white blocks, a reward every 9 steps), with the Atari
# configs' default recipe, on 84 x 84 frames through the fused Nature CNN.
# Measured on 2 cores as this test runs (4 fake devices, seeds 0, 1, 2;
# docs/pong.md, "The CI test"): from random play (about -0.8)
# recipe=vtrace's windows first pass 0.5 at 67k-120k agent steps and 0.8 at
# 143k-209k, and end at 0.8-1.0 after 300k. IMPALA's learner as it was
# (recipe=impala_adam: one Adam step per batch, raw advantages, uncentred
# frames) stays at -0.84 to -0.76 for 300k, its policy blind (spread over
# states 0.005). The budget is about twice the slowest crossing of 0.5.
PONG_LIKE_STEPS = 250_000
PONG_LIKE_PASS = 0.5


@pytest.mark.slow  # the full suite only, not the CI tier (docs/testing.md): the longest learning test, 4-11 min on 2 cores
def test_vtrace_learns_catch_on_pongs_grey(tmp_path):
  config = catch_config.get_config('pong,recipe=vtrace')
  with config.unlocked():
    config.total_env_steps = PONG_LIKE_STEPS
  records = train_and_read(config, tmp_path)
  returns = [r['episode_return/Catch'] for r in records if r.get('episodes/Catch', 0) >= 50]
  assert returns and min(returns) < -0.5, returns   # it started at random play
  assert max(returns) >= PONG_LIKE_PASS, returns
