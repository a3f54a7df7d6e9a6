"""The frames and step bookkeeping the learner receives, on real unrolls from
the real Actor (EnvPool Pong-v5; CartPole-v1 for episode ends, which a
Pong game reaches only after ~800 steps). The checks are
analysis/frame_checks.py's, on what analysis/frame_collect.py collects."""

import flax.linen as nn
import jax
import numpy as np
import pytest

from configs import atari_single, cartpole
from configs.validation import validate_spec
from analysis import frame_checks as inspect
from analysis import frame_collect
from networks.torsos import NatureCNNTorso


def _collect(config, num_blocks, envs, unroll_length=20, policy_scale=1.0):
  config.actors.envs_per_actor = envs
  config.unroll_length = unroll_length
  return frame_collect.collect(validate_spec(config), num_blocks, policy_scale=policy_scale)


@pytest.fixture(scope='module')
def pong():
  return _collect(atari_single.get_config('game=Pong'), num_blocks=3, envs=4)


@pytest.fixture(scope='module')
def cart():
  # A sharpened policy whose logits change between steps, so that sampling
  # replayed with the logits one step off disagrees (a fresh policy is
  # near-uniform, and a fresh Pong policy nearly the same on every frame).
  return _collect(cartpole.get_config(), num_blocks=6, envs=4, policy_scale=100.0)


def _assert_pass(checks, *names):
  for name in names:
    assert checks[name].passed, f'{checks[name].what}: {checks[name].detail}'


def test_pong_frames_are_grey_84x84_stacks_with_the_newest_last(pong):
  checks = inspect.check_unrolls(pong.unrolls)
  _assert_pass(checks, 'frame_shape', 'newest_last', 'not_newest_first', 'not_frozen',
               'reset_stack')


def test_a_reversed_stack_is_caught(pong):
  flipped = [u._replace(obs={**u.obs, 'frames': u.obs['frames'][:, :, ::-1]})
             for u in pong.unrolls]
  checks = inspect.check_unrolls(flipped)
  assert not checks['newest_last'].passed and not checks['not_newest_first'].passed


def test_pong_unrolls_overlap_by_one_step_and_carry_the_previous_action_and_reward(pong):
  checks = inspect.check_unrolls(pong.unrolls)
  _assert_pass(checks, 'overlap', 'prev_keys')
  assert len(pong.unrolls) == 3 and pong.unrolls[0].obs['frames'].shape == (21, 4, 4, 84, 84)


def test_pong_env_flags_match_the_unrolls(pong):
  _assert_pass(inspect.check_env_record(pong), 'discount', 'first_after_end', 'no_life_loss_end')


def test_behaviour_logits_are_the_networks_on_the_stored_obs(pong):
  # The check also requires network(obs[t+1]) to differ 10x more than network(obs[t]).
  _assert_pass(inspect.check_behaviour_logits(pong, max_unrolls=1), 'logits', 'sampling')


def test_actions_are_sampled_from_the_stored_logits_of_their_step(cart):
  _assert_pass(inspect.check_behaviour_logits(cart, max_unrolls=2), 'logits', 'sampling')
  seq = frame_collect.stitch(cart.unrolls)
  off = np.asarray(inspect.replay_actions(cart.actor_seed, np.roll(seq['behaviour_logits'], 1, 0)))
  assert np.mean(off == seq['action']) < 0.95  # the check tells logits[t] from logits[t-1]


def test_episode_ends_reset_steps_and_logged_games_on_cartpole(cart):
  checks = {**inspect.check_unrolls(cart.unrolls), **inspect.check_env_record(cart)}
  _assert_pass(checks, 'overlap', 'reset_step', 'prev_keys', 'discount', 'first_after_end',
               'logged_games')
  seq = frame_collect.stitch(cart.unrolls)
  assert (seq['discount'] == 0).sum() >= 4, 'too few episode ends to check'
  for b, f, e in inspect.games_in(seq):
    if e + 2 >= len(seq['first']):
      continue
    assert seq['reward'][e + 1, b] == 0 and seq['first'][e + 2, b] and not seq['first'][e + 1, b]


def test_nature_cnn_scales_uint8_frames_to_the_unit_range():
  torso = NatureCNNTorso()
  rng = np.random.default_rng(0)
  frames = rng.integers(0, 256, size=(3, 4, 84, 84), dtype=np.uint8)
  frames[0], frames[1] = 0, 255
  variables = torso.init(jax.random.key(0), {'frames': frames})
  seen = []

  def grab(next_fun, args, kwargs, context):
    if context.module.name == 'conv1':
      seen.append(np.asarray(args[0]))
    return next_fun(*args, **kwargs)

  with nn.intercept_methods(grab):
    torso.apply(variables, {'frames': frames})
  x = seen[0]
  np.testing.assert_allclose(x, np.transpose(frames, (0, 2, 3, 1)) / 255.0, atol=1e-6)
  assert x[0].max() == 0.0 and x[1].min() == 1.0 and x[2].min() >= 0.0 and x[2].max() <= 1.0


def test_the_agent_torso_input_is_frames_over_255(pong):
  obs = {k: v[:2] for k, v in pong.unrolls[0].obs.items()}
  x = inspect.torso_input(pong.network, pong.variables, obs)
  frames = obs['frames'].reshape((-1, 4, 84, 84))
  np.testing.assert_allclose(x, np.transpose(frames, (0, 2, 3, 1)) / 255.0, atol=1e-6)


def test_envpool_max_pools_the_last_two_frames_of_each_skip(pong):
  check = inspect.check_max_pool('Pong-v5', pong.env_kwargs, steps=30)
  assert check.passed, check.detail
