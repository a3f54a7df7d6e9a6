"""Extension points, from a test file alone: an environment family
registered with envs.registry.register trains, logs its action names,
checks its kwargs at start-up and evaluates, with nothing else changed."""

import numpy as np
import pytest

from analysis import evaluation
from analysis.run_loading import load_run
from configs import cartpole
from configs.validation import ConfigError, validate
from envs import registry
from envs.base import StepResult
from envs.family import EnvFamily, EnvKwargsError
from training_runs import train_and_read

TOY_ID = 'ToyCue-v0'
TOY_ACTIONS = ('go_left', 'go_right')
EPISODE_STEPS = 4


class ToyCueEnv:
  """A contextual bandit in episodes of EPISODE_STEPS steps: the state
  shows a cue (one of two one-hot vectors); the action equal to the cue
  pays 1, the other 0. Auto-reset as envs/base.py states."""

  def __init__(self, num_envs, task_id, reward_scale=1.0, seed=0, size=4):
    self.num_envs, self.num_actions, self._size = num_envs, len(TOY_ACTIONS), size
    self.observation_spec = {'state': ((size,), np.dtype(np.float32))}
    self._rng = np.random.default_rng(seed)
    self._task = np.full(num_envs, task_id, np.int32)
    self._scale = np.float32(reward_scale)
    self._cue = np.zeros(num_envs, np.int64)
    self._t = np.zeros(num_envs, np.int64)
    self._needs_reset = np.zeros(num_envs, bool)

  def _obs(self):
    state = np.zeros((self.num_envs, self._size), np.float32)
    state[np.arange(self.num_envs), self._cue] = 1.0
    return {'state': state}

  def _result(self, reward, terminated):
    return StepResult(obs=self._obs(), reward=reward * self._scale, terminated=terminated,
                      truncated=np.zeros(self.num_envs, bool), task_id=self._task)

  def reset(self):
    self._cue = self._rng.integers(0, 2, self.num_envs)
    self._t[:] = 0
    self._needs_reset[:] = False
    return self._result(np.zeros(self.num_envs, np.float32), np.zeros(self.num_envs, bool))

  def step(self, actions):
    actions = np.asarray(actions)
    live = ~self._needs_reset
    reward = np.where(live & (actions == self._cue), 1.0, 0.0).astype(np.float32)
    self._t = np.where(live, self._t + 1, 0)
    terminated = live & (self._t == EPISODE_STEPS)
    self._cue = self._rng.integers(0, 2, self.num_envs)
    self._needs_reset = terminated
    return self._result(reward, terminated)

  def close(self):
    pass


class ToyFamily(EnvFamily):
  name = 'toy'
  actor_kind = 'synthetic'

  def matches(self, env_id):
    return env_id == TOY_ID

  def ids_hint(self):
    return f'a toy id ({TOY_ID})'

  def spaces(self, env_id, env_kwargs, observation_keys=None, with_num_actions=True):
    unknown = sorted(set(env_kwargs) - {'size'})
    if unknown or env_kwargs.get('size', 4) < 2:
      raise EnvKwargsError(f'{env_kwargs} is not valid for {env_id}; allowed keys: size (>= 2)')
    return len(TOY_ACTIONS), {'state': ((env_kwargs.get('size', 4),), np.dtype(np.float32))}

  def make_batches(self, groups, seed, settings):
    return [ToyCueEnv(g.num_envs, g.task_id, g.reward_scale, seed=seed + 1000 * i,
                      **g.env_kwargs) for i, g in groups]

  def action_names(self, env_id, env_kwargs):
    return TOY_ACTIONS

  def evaluation_env(self, env_id, task_id, env_kwargs, num_envs, seed, video,
                     observation_keys, workers):
    return ToyCueEnv(num_envs, task_id, seed=seed, **env_kwargs), None, 4.0


@pytest.fixture
def toy_family():
  registry.register(ToyFamily())
  yield
  registry.unregister('toy')


def _toy_config(arg='smoke', **env_kwargs):
  config = cartpole.get_config(arg)
  config.tasks = ({'name': 'Toy', 'env_id': TOY_ID, 'env_kwargs': env_kwargs},)
  return config


def test_a_registered_family_is_found_and_named_in_the_unknown_id_error(toy_family):
  assert registry.env_family(TOY_ID) == 'toy' and registry.actor_kind(TOY_ID) == 'synthetic'
  assert TOY_ID in registry.known_env_ids_hint()
  with pytest.raises(ValueError, match='already registered'):
    registry.register(ToyFamily())
  config = _toy_config()
  config.tasks = ({'name': 'Toy', 'env_id': 'ToyCue-v9', 'env_kwargs': {}},)
  with pytest.raises(ConfigError, match=rf'tasks\[0\].env_id: unknown env id .*{TOY_ID}'):
    validate(config)


def test_its_kwargs_are_checked_at_start_naming_the_field(toy_family):
  with pytest.raises(ConfigError, match=r'tasks\[0\].env_kwargs: .*allowed keys: size'):
    validate(_toy_config(colour=3))
  plan = validate(_toy_config(size=6))
  assert plan.actors.num_actors == 1 and plan.envpool_pools == 0   # stepped in the actor thread


def test_without_registration_the_id_is_unknown():
  with pytest.raises(ConfigError, match=r'tasks\[0\].env_id: unknown env id'):
    validate(_toy_config())


def test_a_registered_family_trains_logs_its_action_names_and_evaluates(toy_family, tmp_path):
  config = _toy_config(None)   # the full CartPole recipe on the toy: it learns the cue
  config.total_env_steps = 40_000
  records = train_and_read(config, tmp_path)
  assert records[-1]['env_steps'] >= 40_000
  assert {'actions/Toy/go_left', 'actions/Toy/go_right'} <= set(records[-1])
  returns = [r['episode_return/Toy'] for r in records if r.get('episodes/Toy', 0) >= 10]
  # Random play scores 2 of 4; following the cue, 4.
  assert returns and max(returns) >= 3.5, returns
  run = load_run(str(tmp_path / 'run'))
  env, frame_fn, fps = evaluation.make_task_env(run, 0, 4, seed=0, video=False)
  assert isinstance(env, ToyCueEnv) and frame_fn is None and fps == 4.0
