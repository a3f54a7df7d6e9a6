"""Catch-pixels (envs/catch.py): the rules, the drawing, the auto-reset
convention, its config and validation (its learning runs:
tests/learning/test_catch_learning.py)."""

import numpy as np
import pytest

from configs import catch as catch_config
from configs import common
from configs.validation import ConfigError, validate
from envs import catch, registry

SMALL = {'img_height': 40, 'img_width': 40}  # 10 x 5 cells of 4 x 8 pixels


def _env(num_envs=4, seed=0, **kwargs):
  return catch.CatchEnv(catch.ENV_ID, num_envs, task_id=3, env_kwargs={**SMALL, **kwargs},
                        reward_scale=1.0, seed=seed)


def _cell(frame, row, column):
  """The 4 x 8 block of a 40 x 40 frame that draws cell (row, column)."""
  return frame[4 * row:4 * (row + 1), 8 * column:8 * (column + 1)]


def _play_one_episode(env, actions):
  """Steps until every env terminated; returns the StepResults (reset excluded)."""
  results = []
  for _ in range(env._rows - 1):
    results.append(env.step(actions))
  return results


def test_spec_and_reset():
  env = _env()
  assert (env.num_envs, env.num_actions) == (4, 3)
  assert env.observation_spec == {'frames': ((4, 40, 40), np.dtype(np.uint8))}
  r = env.reset()
  assert r.obs['frames'].shape == (4, 4, 40, 40) and r.obs['frames'].dtype == np.uint8
  assert r.reward.dtype == np.float32 and not r.reward.any()
  assert not r.terminated.any() and not r.truncated.any()
  np.testing.assert_array_equal(r.task_id, np.full(4, 3, np.int32))
  # The stack starts as four copies of the first frame, as EnvPool Atari's.
  for f in range(4):
    np.testing.assert_array_equal(r.obs['frames'][:, f], r.obs['frames'][:, -1])


def test_ball_and_paddle_are_drawn_where_they_are():
  env = _env(num_envs=8)
  frames = env.reset().obs['frames'][:, -1]
  assert set(np.unique(frames)) == {0, 255}
  for b in range(8):
    ball, paddle = env._ball_x[b], 2  # the paddle starts in the middle column
    assert (_cell(frames[b], 0, ball) == 255).all()
    assert (_cell(frames[b], 9, paddle) == 255).all()
    # Nothing else: exactly two cells of 4 x 8 bright pixels.
    assert (frames[b] == 255).sum() == 2 * 32
  # One step right: the ball falls one row, the paddle moves one column.
  frames = env.step(np.full(8, 2)).obs['frames'][:, -1]
  for b in range(8):
    assert (_cell(frames[b], 1, env._ball_x[b]) == 255).all()
    assert (_cell(frames[b], 9, 3) == 255).all()
    assert (frames[b] == 255).sum() == 2 * 32


def test_frame_stack_is_newest_last_and_shifts_by_one():
  env = _env()
  stack = env.reset().obs['frames']
  for _ in range(5):
    new = env.step(np.full(4, 1)).obs['frames']
    np.testing.assert_array_equal(new[:, :3], stack[:, 1:])
    np.testing.assert_array_equal(new[:, 3], env.render(range(4))[..., 0])
    stack = new
  # The newest frame shows the ball lowest (it falls one row per step).
  ball_rows = [np.flatnonzero(stack[0, f, :36].any(axis=1))[0] // 4 for f in range(4)]
  assert ball_rows == [2, 3, 4, 5]


def test_reward_only_when_the_ball_reaches_the_bottom():
  env = _env(num_envs=16, seed=1)
  env.reset()
  start = env._ball_x.copy()
  # Move the paddle to the ball's column, then stay: every env catches.
  results = []
  for t in range(9):
    actions = np.where(t < 2, np.sign(start - env._paddle_x) + 1, 1)
    results.append(env.step(actions))
  for r in results[:-1]:
    assert not r.reward.any() and not r.terminated.any()
  np.testing.assert_array_equal(results[-1].reward, np.ones(16, np.float32))
  assert results[-1].terminated.all() and not results[-1].truncated.any()


def test_miss_gives_minus_one_and_reward_scale_applies():
  env = catch.CatchEnv(catch.ENV_ID, 64, 0, SMALL, reward_scale=0.5, seed=2)
  env.reset()
  start = env._ball_x.copy()
  final = _play_one_episode(env, np.zeros(64, np.int64))[-1]  # all the way left
  np.testing.assert_array_equal(final.reward, np.where(start == 0, 0.5, -0.5).astype(np.float32))
  assert final.terminated.all()


def test_step_after_termination_is_a_reset_step():
  env = _env(num_envs=4, seed=3)
  env.reset()
  _play_one_episode(env, np.ones(4, np.int64))
  r = env.step(np.full(4, 2))  # ignored: this step resets
  assert not r.reward.any() and not r.terminated.any() and not r.truncated.any()
  np.testing.assert_array_equal(env._paddle_x, np.full(4, 2))   # did not move right
  np.testing.assert_array_equal(env._ball_y, np.zeros(4))
  for f in range(4):  # a fresh stack of copies of the first frame
    np.testing.assert_array_equal(r.obs['frames'][:, f], r.obs['frames'][:, -1])
  # The next step is an ordinary one again.
  r = env.step(np.full(4, 2))
  np.testing.assert_array_equal(env._paddle_x, np.full(4, 3))
  assert not r.terminated.any()


def test_envs_out_of_step_reset_independently():
  env = _env(num_envs=2, seed=4)
  env.reset()
  for _ in range(4):
    env.step(np.ones(2, np.int64))
  env._start(np.array([False, True]))  # env 1 starts over: 4 rows behind env 0
  rs = [env.step(np.ones(2, np.int64)) for _ in range(6)]
  np.testing.assert_array_equal([r.terminated for r in rs][4], [True, False])
  assert not rs[5].terminated.any()
  assert env._ball_y.tolist() == [0, 6]  # env 0 reset on its own, env 1 went on


def test_same_seed_same_games():
  a, b, c = _env(seed=7), _env(seed=7), _env(seed=8)
  runs = []
  for env in (a, b, c):
    rng = np.random.default_rng(0)
    out = [env.reset().obs['frames']]
    for _ in range(30):
      r = env.step(rng.integers(0, 3, 4))
      out.append(np.concatenate([r.obs['frames'].ravel(), r.reward.view(np.uint8)]))
    runs.append(np.concatenate([x.ravel() for x in out]))
  np.testing.assert_array_equal(runs[0], runs[1])
  assert not np.array_equal(runs[0], runs[2])


def test_frame_size_and_grid_are_configurable():
  env = catch.CatchEnv(catch.ENV_ID, 2, 0, {'rows': 6, 'columns': 3}, seed=0)
  assert env.observation_spec['frames'][0] == (4, 84, 84)
  frames = env.reset().obs['frames'][:, -1]
  # 84 / 3 columns = 28 pixels wide; 84 / 6 rows = 14 pixels high.
  assert (frames[0] == 255).sum() == 2 * 28 * 14
  assert len(_play_one_episode(env, np.ones(2, np.int64))) == 5
  assert env.step(np.ones(2, np.int64)).obs['frames'].shape == (2, 4, 84, 84)


def test_pong_like_catch_draws_small_white_blocks_on_pongs_grey():
  env = catch.CatchEnv(catch.ENV_ID, 3, task_id=0, env_kwargs=catch.pong_like(), seed=0)
  frames = env.reset().obs['frames'][:, -1]
  assert set(np.unique(frames)) == {106, 236}
  # Two blocks of one 10 x 10 grid cell (8 or 9 pixels a side) each.
  assert ((frames == 236).sum(axis=(1, 2)) <= 2 * 9 * 9).all()
  assert ((frames == 236).sum(axis=(1, 2)) >= 2 * 8 * 8).all()
  assert len(_play_one_episode(env, np.ones(3, np.int64))) == 9  # a reward every 9 steps


@pytest.mark.parametrize('kwargs,match', [
    ({'colums': 5}, 'unknown key.*colums.*allowed keys: rows, columns, img_height, img_width, '
                    'background, foreground'),
    ({'background': 300}, 'background must be a grey level in 0..255'),
    ({'background': 255}, 'background and foreground are both 255'),
    ({'rows': 1}, 'rows >= 2'),
    ({'img_height': 8}, 'cannot draw'),
    ({'rows': 4.5}, 'rows must be an integer'),
])
def test_bad_kwargs_are_refused(kwargs, match):
  with pytest.raises(ValueError, match=match):
    _env(**kwargs)


def test_registry_builds_catch():
  assert registry.env_family(catch.ENV_ID) == 'synthetic'
  assert catch.ENV_ID in registry.known_env_ids_hint()
  assert registry.action_names(catch.ENV_ID, {}, 3) == ('left', 'stay', 'right')
  group = registry.EnvGroup(task_id=1, env_id=catch.ENV_ID, env_kwargs=SMALL,
                            reward_scale=1.0, num_envs=3)
  env = registry.make_actor_envs([group], seed=0, resources={},
                                 settings=registry.default_settings(),
                                 observation_keys=('frames',))
  r = env.step(np.ones(3, np.int64))
  assert r.obs['frames'].shape == (3, 4, 40, 40) and r.task_id.tolist() == [1, 1, 1]


def test_run_loading_knows_the_spaces():
  from envs.registry import env_spaces
  assert env_spaces(catch.ENV_ID, SMALL, ('frames',)) == (
      3, {'frames': ((4, 40, 40), np.dtype(np.uint8))})


@pytest.mark.parametrize('arg', [None, 'smoke', 'recipe=impala,size=40'])
def test_config_validates(arg):
  config = catch_config.get_config(arg)
  plan = validate(config)
  assert plan.observation_keys == ('frames',) and plan.frames_per_step == 1
  assert plan.task_env_ids == (catch.ENV_ID,) and plan.normalised_score(0, 1.0) is None
  assert config.network.name == 'shallow' and config.reward_mode == 'clip'


def test_config_recipes():
  """The optimisation is common.apply_recipe's, on 1 actor x 16 envs."""
  for recipe in common.RECIPES:
    config = catch_config.get_config(f'recipe={recipe}')
    expected = common.base_config()
    expected.actors.envs_per_actor = 16
    common.apply_recipe(expected, recipe)
    for field in ('unroll_length', 'batch_size', 'learning_rate', 'optimizer'):
      assert config[field] == expected[field], (recipe, field)
  assert catch_config.get_config().unroll_length == 5  # a2c is the default


@pytest.mark.parametrize('kwargs,match', [
    ({'paddle_width': 2}, r"tasks\[0\].env_kwargs: .*allowed keys: rows, columns, img_height"),
    ({'img_height': 32, 'img_width': 32},
     r"tasks\[0\].env_kwargs: frames of 32x32 .*'shallow'.*36"),
    ({'columns': 0}, r'tasks\[0\].env_kwargs: .*columns >= 1'),
])
def test_validation_refuses_bad_catch_kwargs(kwargs, match):
  config = catch_config.get_config('size=40')
  config.tasks = ({**config.tasks[0], 'env_kwargs': {**config.tasks[0]['env_kwargs'], **kwargs}},)
  with pytest.raises(ConfigError, match=match) as e:
    validate(config)
  assert e.value.field == 'tasks[0].env_kwargs'
