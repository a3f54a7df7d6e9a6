"""IMPALA's Atari protocol on EnvPool, task ids, action sets, whole-game
returns and human-normalised scores."""

import dataclasses

import ml_collections
import numpy as np
import pytest

from configs import atari_multitask, atari_popart, atari_single
from configs.validation import validate, validate_spec
from envs import atari, registry
from envs.envpool_env import EnvPoolEnv


def _envs(config, plan):
  return registry.make_actor_envs(plan.actor_env_groups[0], seed=0,
                                  resources=plan.actors.resources,
                                  settings=validate_spec(config).envs,
                                  observation_keys=plan.observation_keys)


def test_single_game_preprocessing_and_minimal_action_set():
  config = atari_single.get_config('game=Pong,smoke')
  plan = validate(config)
  env = _envs(config, plan)
  try:
    assert env.observation_spec == {'frames': ((4, 84, 84), np.dtype(np.uint8))}
    result = env.reset()
    assert result.obs['frames'].shape == (env.num_envs, 4, 84, 84)
    assert result.obs['frames'].dtype == np.uint8
    assert env.num_actions == 6  # Pong's minimal set
    result = env.step(np.zeros(env.num_envs, np.int32))
    assert result.reward.dtype == np.float32
  finally:
    env.close()
  assert plan.frames_per_step == 4
  kwargs = plan.actor_env_groups[0][0].env_kwargs
  assert kwargs['max_episode_steps'] * kwargs['frame_skip'] == 108_000
  assert kwargs['noop_max'] == 30 and kwargs['episodic_life'] and not kwargs['reward_clip']


def test_multitask_uses_the_full_action_set_and_config_task_order():
  config = atari_popart.get_config('games=Pong+Breakout+Seaquest,smoke')
  plan = validate(config)
  assert plan.task_names == ('Pong', 'Breakout', 'Seaquest')
  assert plan.task_env_ids == ('Pong-v5', 'Breakout-v5', 'Seaquest-v5')
  assert plan.normalised_score(0, 14.6) == pytest.approx(1.0)   # Pong's human score
  env = _envs(config, plan)
  try:
    assert env.num_actions == 18
    result = env.reset()
    # Two envs per game, in the config's order.
    np.testing.assert_array_equal(result.task_id, [0, 0, 1, 1, 2, 2])
  finally:
    env.close()


def test_sticky_actions_and_action_set_switches():
  group = atari.AtariConfig()
  assert atari.protocol_kwargs(group, 1)['repeat_action_probability'] == 0.0
  group = dataclasses.replace(group, sticky_actions=True)
  assert atari.protocol_kwargs(group, 1)['repeat_action_probability'] == 0.25
  assert not atari.protocol_kwargs(group, 1)['full_action_space']
  group = dataclasses.replace(group, action_set='full')
  assert atari.protocol_kwargs(group, 1)['full_action_space']
  # Evaluation plays whole games.
  assert not atari.protocol_kwargs(group, 1, training=False)['episodic_life']


def test_config_overrides_reach_the_env_kwargs():
  config = atari_single.get_config('game=Pong')
  config.atari.sticky_actions = True
  config.atari.episodic_life = False
  kwargs = validate(config).actor_env_groups[0][0].env_kwargs
  assert kwargs['repeat_action_probability'] == 0.25 and not kwargs['episodic_life']


def test_the_game_list_is_every_atari_spec_and_nothing_else():
  """ATARI_GAMES is read from EnvPool's registry, not by making every spec:
  the seed's six games and Breakout are in, the MuJoCo, classic-control and
  other families' -v5 ids are out, and a sample of the list (the first, the
  last and the six) makes an AtariEnvSpec."""
  import envpool
  games = atari.ATARI_GAMES
  assert len(games) == 104 and list(games) == sorted(games)
  for g in ('AirRaid', 'Carnival', 'DemonAttack', 'NameThisGame', 'Pong', 'SpaceInvaders',
            'Breakout'):
    assert g in games
  others = [e[:-3] for e in envpool.list_all_envs() if e.endswith('-v5') and e[:-3] not in games]
  assert 'Walker2d' in others and 'Ant' in others
  for g in (games[0], games[-1], 'Pong', 'Carnival'):
    assert type(envpool.make_spec(f'{g}-v5')).__name__ == 'AtariEnvSpec'


def test_unknown_games_fail_with_the_valid_list():
  with pytest.raises(ValueError, match=r'unknown Atari game\(s\) Pnog; valid games: .*Pong'):
    atari_multitask.get_config('games=Pnog+Breakout')


def test_game_over_is_reported_only_when_the_last_life_is_lost():
  group = atari.AtariConfig()
  env = EnvPoolEnv('Breakout-v5', 1, 0, atari.protocol_kwargs(group, 1), seed=3)
  rng = np.random.default_rng(0)
  try:
    env.reset()
    lives_lost = 0
    for _ in range(5000):
      r = env.step(rng.integers(0, env.num_actions, 1))
      if r.game_ended[0]:
        break
      lives_lost += int(r.terminated[0])
    else:
      pytest.fail('no game over within 5000 steps')
    assert r.terminated[0] and r.game_over[0]
    assert lives_lost == 4  # Breakout has 5 lives: four life losses end only the life
  finally:
    env.close()


def test_human_normalised_scores():
  assert atari.human_normalised('Pong', -20.7) == pytest.approx(0.0)
  assert atari.human_normalised('Pong', 14.6) == pytest.approx(1.0)
  assert atari.human_normalised('Breakout', 30.5 + 28.8) == pytest.approx(2.0)
  assert atari.human_normalised('AirRaid', 100.0) is None
  # The table names every game EnvPool ships; the Atari-57 all have references.
  assert set(atari.REFERENCE_SCORES) == set(atari.ATARI_GAMES)
  assert sum(v is not None for v in atari.REFERENCE_SCORES.values()) == 57
  assert atari.hns_summary({'a': 0.5, 'b': 2.0, 'c': 1.0, 'd': None}) == {
      'median': 1.0, 'mean': pytest.approx(3.5 / 3)}
  assert atari.hns_summary({'a': 0.0, 'b': 1.0})['median'] == 0.5


def test_action_set_minimal_is_refused_for_several_games():
  config = atari_popart.get_config('games=Pong+Breakout')
  config.atari.action_set = 'minimal'
  with pytest.raises(Exception, match='atari.action_set'):
    validate(config)
