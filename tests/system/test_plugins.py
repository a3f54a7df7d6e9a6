"""Extension points, from a test file alone: an environment family
registered with envs.registry.register trains, logs its action names,
checks its kwargs at start-up and evaluates; a family stepping its envs in
worker processes of its own owns a settings group, sizes its workers in
the cores it is given, trains and stops them; a torso registered with
networks.torsos.register is a network.name whose abilities the settings
check, and learns; a learner registered with rl.algorithms.register (its
own loss, settings group and state) trains on it, checks its settings at
start-up, and its state is saved and restored with the checkpoint; nothing
else changed."""

import dataclasses
import multiprocessing as mp
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from agents.checkpoint import Checkpointer
from analysis import evaluation
from analysis.run_loading import load_run
from configs import cartpole
from configs.validation import ConfigError, validate
from envs import registry
from envs.base import StepResult
from envs.family import EnvFamily, EnvKwargsError
from infra.settings import setting, within
from networks import torsos
from rl import actor_critic as ac
from rl import algorithms
from rl import sgd
from tests.support.training_runs import train_and_read

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

  def matches(self, env_id):
    return env_id == TOY_ID

  def ids_hint(self):
    return f'a toy id ({TOY_ID})'

  def spaces(self, env_id, env_kwargs, observation_keys=None, with_num_actions=True):
    unknown = sorted(set(env_kwargs) - {'size'})
    if unknown or env_kwargs.get('size', 4) < 2:
      raise EnvKwargsError(f'{env_kwargs} is not valid for {env_id}; allowed keys: size (>= 2)')
    return len(TOY_ACTIONS), {'state': ((env_kwargs.get('size', 4),), np.dtype(np.float32))}

  def make_batches(self, groups, seed, context):
    return [ToyCueEnv(g.num_envs, g.task_id, g.reward_scale, seed=seed + 1000 * i,
                      **g.env_kwargs) for i, g in groups]

  def action_names(self, env_id, env_kwargs):
    return TOY_ACTIONS

  def evaluation_env(self, env_id, task_id, env_kwargs, num_envs, seed, video, context):
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
  assert registry.env_family(TOY_ID) == 'toy'
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
  assert plan.actors.num_actors == 1 and plan.actors.resources == {}   # stepped in the actor thread


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


# A family of its own worker processes: the same cue envs, each worker
# stepping a contiguous slice of an actor's envs (all its tasks together),
# as NLE's workers do.
PROC_ID = 'ToyCueProc-v0'


@dataclasses.dataclass(frozen=True)
class ToyProcConfig:
  """The toy's worker processes (the config's `toy_proc` group)."""
  workers: int = setting(0, 'worker processes per actor; 0 = one per core the actor has',
                         within(0, 64))


def _toy_worker(conn, envs):
  """A worker's loop: one ToyCueEnv per (task id, reward scale, seed) of `envs`."""
  cues = [ToyCueEnv(1, task, scale, seed=seed) for task, scale, seed in envs]
  while True:
    command, actions = conn.recv()
    if command == 'close':
      return
    results = [e.reset() if command == 'reset' else e.step(actions[i:i + 1])
               for i, e in enumerate(cues)]
    conn.send([(r.obs['state'], r.reward, r.terminated, r.task_id) for r in results])


class ProcessCueEnv:
  """ToyCueEnvs stepped in `workers` spawned processes, in order."""

  def __init__(self, envs, workers):
    self.num_envs, self.num_actions = len(envs), len(TOY_ACTIONS)
    self.observation_spec = {'state': ((4,), np.dtype(np.float32))}
    bounds = np.linspace(0, len(envs), workers + 1).astype(int)
    context = mp.get_context('spawn')
    self._conns, self.processes = [], []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
      parent, child = context.Pipe()
      process = context.Process(target=_toy_worker, args=(child, envs[lo:hi]), daemon=True)
      process.start()
      self._conns.append(parent)
      self.processes.append(process)
    self._bounds = bounds
    STARTED.extend(self.processes)

  def _ask(self, command, actions=None):
    for conn, lo, hi in zip(self._conns, self._bounds[:-1], self._bounds[1:]):
      conn.send((command, None if actions is None else actions[lo:hi]))
    parts = [r for conn in self._conns for r in conn.recv()]
    return StepResult(obs={'state': np.concatenate([p[0] for p in parts])},
                      reward=np.concatenate([p[1] for p in parts]),
                      terminated=np.concatenate([p[2] for p in parts]),
                      truncated=np.zeros(self.num_envs, bool),
                      task_id=np.concatenate([p[3] for p in parts]))

  def reset(self):
    return self._ask('reset')

  def step(self, actions):
    return self._ask('step', np.asarray(actions))

  def close(self):
    for conn, process in zip(self._conns, self.processes):
      if process.is_alive():
        conn.send(('close', None))
      process.join(timeout=5)


STARTED = []   # every worker process ProcessCueEnv started


class ToyProcFamily(ToyFamily):
  name = 'toy_proc'
  settings_groups = {'toy_proc': ToyProcConfig}
  batches_together = True   # an actor's tasks share its workers

  def matches(self, env_id):
    return env_id == PROC_ID

  def ids_hint(self):
    return f'a toy id in worker processes ({PROC_ID})'

  def size(self, cores, num_actors, envs_per_actor, num_tasks, settings):
    workers = settings['toy_proc'].workers
    if workers:
      return {'workers': workers}, ()
    return {'workers': min(envs_per_actor, max(1, cores // num_actors))}, ('toy_proc.workers',)

  def describe(self, resources, num_actors, num_tasks):
    return f'{resources["workers"]} toy worker processes per actor'

  def make_batches(self, groups, seed, context):
    envs = [(g.task_id, g.reward_scale, seed + 1000 * i + k)
            for i, g in groups for k in range(g.num_envs)]
    return [ProcessCueEnv(envs, min(context.resources['workers'], len(envs)))]


@pytest.fixture
def toy_proc_family():
  registry.register(ToyProcFamily())
  yield
  registry.unregister('toy_proc')


def test_a_family_with_worker_processes_owns_its_settings_sizes_and_stops_them(
    toy_proc_family, tmp_path):
  config = cartpole.get_config(None)   # the full CartPole recipe: it learns the cue
  assert config.toy_proc.workers == 0   # its group is in every config, at its defaults
  config.tasks = ({'name': 'Left', 'env_id': PROC_ID}, {'name': 'Right', 'env_id': PROC_ID})
  config.actors.cores = 4
  plan = validate(config)
  assert plan.actors.resources == {'toy_proc': {'workers': 4}}   # 4 cores, 1 actor thread
  assert 'toy_proc.workers' in plan.actors.chosen
  assert '4 toy worker processes per actor' in plan.describe_actors()
  config.toy_proc.workers = 65
  with pytest.raises(ConfigError, match=r'config field toy_proc.workers: must be in \[0, 64\]'):
    validate(config)
  config.toy_proc.workers = 2
  assert validate(config).actors.resources == {'toy_proc': {'workers': 2}}
  config.total_env_steps = 40_000
  records = train_and_read(config, tmp_path)
  returns = [r['episode_return/Left'] for r in records if r.get('episodes/Left', 0) >= 10]
  assert returns and max(returns) >= 3.0, returns   # random 2 of 4
  assert len(STARTED) == 2 and not any(p.is_alive() for p in STARTED)


class ToyMislabelledFamily(ToyFamily):
  """The toy cue whose envs report a task id the run does not have."""
  name = 'toy_mislabelled'

  def matches(self, env_id):
    return env_id == 'ToyCueMislabelled-v0'

  def make_batches(self, groups, seed, context):
    return [ToyCueEnv(g.num_envs, g.task_id + 5, g.reward_scale, seed=seed) for _, g in groups]


def test_a_family_giving_task_ids_outside_the_run_stops_it_in_one_line(tmp_path):
  from agents.update_checks import TaskIdError
  from tests.support.training_runs import train
  registry.register(ToyMislabelledFamily())
  try:
    config = _toy_config()
    config.tasks = ({'name': 'Toy', 'env_id': 'ToyCueMislabelled-v0'},)
    config.workdir = str(tmp_path / 'run')
    with pytest.raises(TaskIdError, match=r"steps of task id 5, outside the run's 1 tasks"):
      train(config)
  finally:
    registry.unregister('toy_mislabelled')


class ToyLinearTorso(nn.Module):
  """The smallest torso: obs['state'] [N, D] through one tanh Dense layer."""
  size: int = 16
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, obs):
    x = nn.Dense(self.size, dtype=self.dtype, name='toy_dense')(obs['state'].astype(self.dtype))
    return jnp.tanh(x).astype(jnp.float32)


@pytest.fixture
def toy_torso():
  torsos.register('toy_linear', torsos.Torso(ToyLinearTorso, ('state',)))
  yield
  torsos.unregister('toy_linear')


def _toy_torso_config():
  config = _toy_config(None)   # the full CartPole recipe on the toy cue
  config.network.name = 'toy_linear'
  config.network.torso_kwargs = {'size': 8}
  return config


def test_without_registration_the_torso_is_unknown(toy_family):
  with pytest.raises(ConfigError, match=r"network.name: 'toy_linear' is not allowed; choose "
                                        r'one of attention, mlp'):
    validate(_toy_torso_config())


def test_a_registered_torso_is_a_choice_its_abilities_are_checked_and_it_learns(
    toy_family, toy_torso, tmp_path):
  config = _toy_torso_config()
  assert validate(config).observation_keys == ('state',)
  config.network.centre_frames = True   # the toy does not centre frames
  with pytest.raises(ConfigError, match=r"network.centre_frames: network 'toy_linear' does not "
                                        r'centre frames; it works with network.name in attention'):
    validate(config)
  config.network.centre_frames = False
  config.network.kernels = 'xla'        # nor has it convolutions
  with pytest.raises(ConfigError, match=r"network.kernels: network 'toy_linear' has no "
                                        'convolutions'):
    validate(config)
  config.network.kernels = 'auto'
  config.total_env_steps = 40_000
  records = train_and_read(config, tmp_path)
  returns = [r['episode_return/Toy'] for r in records if r.get('episodes/Toy', 0) >= 10]
  # Random play 2 of 4, the cue 4 (3.46 by 40k on a loaded CI machine).
  assert returns and max(returns) >= 3.0, returns
  run = load_run(str(tmp_path / 'run'))
  assert run.variables['params']['torso']['toy_dense']['kernel'].shape == (4, 8)


# A learner of its own: one-step actor-critic (the advantage r + gamma V(x')
# - V(x), no importance weights), with a state it keeps between updates: the
# updates it has made and a running mean of the batches' rewards.
TOY_LEARNER = 'toy_a2c'


@dataclasses.dataclass(frozen=True)
class ToyA2CConfig:
  reward_decay: float = setting(0.9, "decay of the running mean of the batches' rewards",
                                within(0, 1, high_closed=False))


def _toy_loss(apply_fn, cfg):
  def loss(params, stats, batch, entropy_cost=None):
    entropy_weight = cfg.entropy_cost if entropy_cost is None else entropy_cost
    e = ac.evaluate_unroll(apply_fn, cfg, params, stats, batch)
    rewards, discounts, mask = ac.episode_aware(e.raw_values, e.rewards, batch.discount[:-1],
                                                batch.first, cfg.discount)
    target = jax.lax.stop_gradient(rewards + discounts * e.values[1:])
    advantage = jax.lax.stop_gradient(target - e.values[:-1])
    entropy = ac.entropy(e.log_pi)
    total = (-jnp.sum(mask * advantage * e.log_pi_a)
             + cfg.baseline_cost * 0.5 * jnp.sum(mask * (target - e.values[:-1]) ** 2)
             - entropy_weight * jnp.sum(mask * entropy))
    metrics = {'loss/total': total, 'entropy': jnp.sum(mask * entropy) / jnp.sum(mask)}
    return total, ac.LossOutput(total, stats, metrics, {})
  return loss


def _toy_make_update(apply_fn, cfg, optimizer, value_head, axis_name, seed, max_grad_norm):
  del seed
  step_fn = sgd.make_sgd_step(_toy_loss(apply_fn, cfg), optimizer, value_head, axis_name,
                              max_grad_norm)
  decay = cfg.settings.reward_decay

  def update(params, opt_state, stats, batch, step, state):
    del step
    params, opt_state, out = step_fn(params, opt_state, stats, batch)
    mean_reward = jax.lax.pmean(jnp.mean(batch.reward[:-1]), axis_name)
    state = {'updates': state['updates'] + 1,
             'reward_mean': decay * state['reward_mean'] + (1 - decay) * mean_reward}
    metrics = {**out.metrics, 'toy/updates': state['updates'],
               'toy/reward_mean': state['reward_mean']}
    return params, opt_state, stats, metrics, state

  return update


TOY_A2C = ac.Learner(
    name=TOY_LEARNER, config_group=TOY_LEARNER,
    settings_type=ToyA2CConfig, make_update=_toy_make_update,
    optimizer_steps=lambda settings: 1, batch_split=lambda settings, unrolls, length: None,
    init_state=lambda params: {'updates': jnp.zeros((), jnp.int32),
                               'reward_mean': jnp.zeros((), jnp.float32)})


@pytest.fixture
def toy_learner():
  algorithms.register(TOY_A2C)
  yield
  algorithms.unregister(TOY_LEARNER)


def _toy_learner_config(arg='smoke', decay=0.9):
  config = _toy_config(arg)
  config.loss.name = TOY_LEARNER
  config.popart.enabled = False
  config.toy_a2c = ml_collections.ConfigDict({'reward_decay': decay})
  return config


def test_a_registered_learner_is_a_choice_and_checks_its_settings(toy_family, toy_learner):
  assert TOY_LEARNER in algorithms.names()
  with pytest.raises(ValueError, match='registered already'):
    algorithms.register(TOY_A2C)
  with pytest.raises(ConfigError, match=r'config field toy_a2c.reward_decay: must be in \[0, 1\), '
                     'got 1.5'):
    validate(_toy_learner_config(decay=1.5))
  config = _toy_learner_config()
  del config['toy_a2c']
  with pytest.raises(ConfigError, match="config field toy_a2c: loss.name='toy_a2c' reads its "
                     "settings from the config group 'toy_a2c', which this config lacks"):
    validate(config)
  validate(_toy_learner_config())


def test_without_registration_the_learner_is_unknown(toy_family):
  with pytest.raises(ConfigError, match=r"config field loss.name: 'toy_a2c' is not allowed; "
                     r'choose one of impala, ppo$'):
    validate(_toy_learner_config())


def _saved_learner_state(workdir):
  """(learner steps, the learner's own state) of the newest checkpoint, as saved."""
  checkpointer = Checkpointer(workdir, read_only=True)
  try:
    state = checkpointer.restore_raw(checkpointer.latest_step())['state']
  finally:
    checkpointer.close()
  return int(state['step']), {k: float(v) for k, v in state['algorithm'].items()}


def test_a_registered_learner_trains_and_its_state_survives_a_resume(toy_family, toy_learner,
                                                                     tmp_path):
  config = _toy_learner_config(None)   # the CartPole recipe's sizes on the toy, 10k steps
  config.total_env_steps = 10_000
  records = train_and_read(config, tmp_path)
  assert records[-1]['env_steps'] >= 10_000 and 'toy/updates' in records[-1]
  steps, state = _saved_learner_state(str(tmp_path / 'run'))
  assert steps > 0 and state['updates'] == steps
  # The rewards are 0 or 1 a step: the running mean lies between.
  assert 0.0 < state['reward_mean'] < 1.0
  # Resumed, the learner counts on from its saved state, not from zero.
  config.total_env_steps = 20_000
  train_and_read(config, tmp_path)
  more_steps, more_state = _saved_learner_state(str(tmp_path / 'run'))
  assert more_steps > steps and more_state['updates'] == more_steps
