"""Actors sized to the machine (configs/actor_sizing.py): the rule's values
worked out by hand, the 2-core settings the recipes were tuned with, and
every shipped config's plan at every core count: a batch that splits and a
bounded policy lag."""

import importlib

import numpy as np
import pytest

from configs import actor_sizing
from configs.actor_sizing import lag_bound
from configs.validation import ConfigError, validate
from envs import atari, catch, registry
from envs.envpool_env import EnvPoolConfig, EnvPoolEnv
from envs.nle_env import NLEConfig

CORE_COUNTS = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256]
SHIPPED = [('atari_single', 'game=Pong'), ('atari_single', 'game=Pong,net=resnet'),
           ('atari_single', 'game=Pong,recipe=ppo'), ('atari_single', 'game=Pong,recipe=a2c'),
           ('atari_popart', None), ('atari_popart', 'games=Pong+Carnival'),
           ('atari_multitask', None), ('nethack_popart', None), ('cartpole', None),
           ('cartpole_popart', None), ('catch', None)]
MAX_LAG = actor_sizing.MAX_POLICY_LAG
ENVPOOL, NLE = registry.family_of('Pong-v5'), registry.family_of('NetHackChallenge-v0')


def size(cores, envs, envpool_pools=0, nle_tasks=False, num_actors=0, envpool_threads=0,
         nle_workers=0, **kwargs):
  """actor_sizing.size for EnvPool pools and/or NLE tasks, the families'
  settings at `envpool_threads` and `nle_workers`."""
  families = (([(ENVPOOL, envpool_pools)] if envpool_pools else [])
              + ([(NLE, 1)] if nle_tasks else []))
  settings = {**registry.default_settings(), 'envpool': EnvPoolConfig(threads=envpool_threads),
              'nle': NLEConfig(workers=nle_workers)}
  return actor_sizing.size(cores, envs, families, settings, num_actors=num_actors, **kwargs)


def counts(s):
  """(actor threads, EnvPool threads per pool, NLE workers per actor), 0 for none."""
  return (s.num_actors, s.resources.get('envpool', {}).get('threads', 0),
          s.resources.get('nle', {}).get('workers', 0))


def _load(name, arg=None, **actors):
  config = importlib.import_module(f'configs.{name}').get_config(arg)
  for key, value in actors.items():
    config.actors[key] = value
  return config


@pytest.mark.parametrize('cores, envs, pools, expected', [
    # cores // 4 actors, at least 2; max(cores, 4) EnvPool threads over actors x pools, at least 2.
    (1, 16, 1, (2, 2)),    # 4 // 2
    (2, 16, 1, (2, 2)),    # the 2-core Pong setting
    (8, 16, 1, (2, 4)),    # 8 // 2
    (16, 16, 1, (4, 4)),   # 16 // 4
    (64, 16, 1, (8, 8)),   # 64 // 4 = 16 actors, capped at 8; 64 // 8
    (256, 16, 1, (8, 16)),  # 256 // 8 = 32, but a pool of 16 envs takes 16 threads at most
    (2, 16, 2, (2, 2)),    # two games: 4 // (2 x 2) = 1 -> 2
    (2, 12, 6, (2, 2)),    # six games: 4 // 12 = 0 -> 2
    (16, 12, 6, (4, 2)),   # 16 // 24 = 0 -> 2
    (48, 12, 6, (8, 2)),   # 12 actors, capped at 8; 48 // 48 = 1 -> 2
    (128, 12, 6, (8, 2)),  # 128 // 48 = 2; a pool of 2 envs takes 2 at most
    (128, 48, 6, (8, 2)),  # pools of 8 envs: 128 // 48 = 2
    (256, 48, 6, (8, 5)),  # 256 // 48 = 5
])
def test_envpool_rule_by_hand(cores, envs, pools, expected):
  # A queue of 1 and 2 blocks per batch (the V-trace recipe): the lag limit never binds.
  s = size(cores, envs, envpool_pools=pools, nle_tasks=False, queue_size=1, blocks_per_batch=2)
  assert counts(s) == expected + (0,)
  assert s.chosen == ('actors.num_actors', 'envpool.threads') and s.cores == cores


@pytest.mark.parametrize('cores, envs, expected', [
    (1, 32, (1, 2)),     # at least 2 workers
    (2, 32, (1, 2)),     # the main job's 2-core setting
    (7, 32, (1, 7)),
    (16, 32, (2, 8)),    # one actor per 8 cores; 16 // 2
    (64, 32, (4, 16)),   # 64 // 8 = 8 actors, capped at 4; 64 // 4
    (64, 4, (4, 4)),     # never more workers than envs
])
def test_nle_rule_by_hand(cores, envs, expected):
  # The main job's queue of 4 and batch of one block: 4 actors reach the lag limit, 8.
  s = size(cores, envs, envpool_pools=0, nle_tasks=True, queue_size=4, blocks_per_batch=1)
  assert counts(s) == (expected[0], 0, expected[1])


def test_synthetic_envs_get_one_actor_and_no_env_threads():
  s = size(16, 16, envpool_pools=0, nle_tasks=False)
  assert counts(s) == (1, 0, 0) and s.resources == {}
  catch_family = registry.family_of(catch.ENV_ID)
  s = actor_sizing.size(16, 16, [(catch_family, 1)], registry.default_settings())
  assert counts(s) == (1, 0, 0) and s.resources == {} and s.chosen == ('actors.num_actors',)


def test_fields_a_config_sets_are_kept_and_the_rest_follow_them():
  s = size(16, 16, envpool_pools=1, nle_tasks=False, num_actors=3)
  assert counts(s)[:2] == (3, 5)   # 16 // 3
  assert s.chosen == ('envpool.threads',)
  s = size(16, 16, envpool_pools=1, nle_tasks=False, num_actors=3, envpool_threads=7)
  assert (counts(s)[:2], s.chosen) == ((3, 7), ())
  s = size(16, 32, envpool_pools=0, nle_tasks=True, nle_workers=5)
  assert (counts(s)[0], counts(s)[2], s.chosen) == (2, 5, ('actors.num_actors',))


def test_a_run_with_both_families_takes_the_most_actors_either_asks():
  # EnvPool asks 16 // 4 = 4 actor threads, NLE 16 // 8 = 2: 4, and each sizes its own.
  s = size(16, 32, envpool_pools=1, nle_tasks=True, queue_size=1, blocks_per_batch=2)
  assert counts(s) == (4, 4, 4)   # threads min(32, max(2, 16 // 4)); workers 16 // 4


def test_size_refuses_impossible_counts():
  with pytest.raises(ValueError, match='cores'):
    size(0, 16, envpool_pools=1, nle_tasks=False)


@pytest.mark.parametrize('actors, queue, blocks, expected', [
    (2, 1, 2, 2),   # the Pong runs: measured policy_lag_max 2
    (2, 1, 3, 2),   # the six-game runs (36 / 12): measured max 1
    (1, 1, 1, 2),   # the main job on 2 cores
    (4, 4, 2, 5),   # ceil(7 / 2) + 1
    (8, 4, 1, 12),
])
def test_lag_bound_by_hand(actors, queue, blocks, expected):
  assert lag_bound(actors, queue, blocks) == expected


def test_the_rule_takes_fewer_actors_where_more_would_pass_the_lag_limit():
  # One block per batch and a queue of 4 (the A2C recipe): 24 cores would
  # give 6 threads, lag ceil(9 / 1) + 1 = 10 > 8; 5 give 9; 4 give 8.
  s = size(24, 16, envpool_pools=1, nle_tasks=False, queue_size=4, blocks_per_batch=1)
  assert s.num_actors == 4 and lag_bound(4, 4, 1) == MAX_LAG
  assert counts(s)[1] == 24 // 4
  # A config's own count is kept, whatever its lag.
  assert size(24, 16, 1, False, num_actors=12, queue_size=4).num_actors == 12


@pytest.mark.parametrize('name, arg, expected', [
    ('atari_single', 'game=Pong', (2, 2, 0)),
    ('atari_popart', 'games=Pong+Carnival', (2, 2, 0)),
    ('atari_popart', None, (2, 2, 0)),
    ('nethack_popart', None, (1, 0, 2)),
])
def test_two_cores_give_the_settings_the_recipes_were_tuned_with(name, arg, expected):
  plan = validate(_load(name, arg, cores=2))
  assert counts(plan.actors) == expected
  assert len(plan.actor_env_groups) == plan.actors.num_actors


def test_ppo_keeps_two_actors_on_any_machine():
  """PPO's ratio wants the behaviour policy 1-2 updates old (its actors wait
  for the learner, which the bound, ceil(2 / 1) + 1, does not count)."""
  plan = validate(_load('atari_single', 'game=Pong,recipe=ppo', cores=64))
  assert counts(plan.actors)[:2] == (2, 16)
  assert plan.actors.lag_bound == 3


@pytest.mark.parametrize('name, arg', SHIPPED)
def test_every_shipped_config_gives_a_plan_the_learner_takes_at_every_core_count(name, arg):
  for cores in CORE_COUNTS:
    plan = validate(_load(name, arg, cores=cores))   # raises if the batch does not split
    config = _load(name, arg, cores=cores)
    envs = config.actors.envs_per_actor
    a = plan.actors
    assert a.cores == cores and a.num_actors >= 1
    assert len(plan.actor_env_groups) == a.num_actors
    assert plan.blocks_per_batch * envs == config.batch_size
    assert 1 <= plan.actors.lag_bound <= MAX_LAG, (cores, plan.actors.lag_bound)
    _, threads, workers = counts(a)
    if 'envpool' in a.resources:
      pools = a.resources['envpool']['pools']
      assert 1 <= threads <= envs
      total = threads * pools * a.num_actors
      assert total <= max(cores, 4, 2 * pools * a.num_actors), (cores, total)
    if 'nle' in name:
      assert 1 <= workers <= envs
      assert workers * a.num_actors <= max(cores, 2)


def test_more_cores_never_mean_fewer_actors_or_threads():
  last = (0, 0)
  for cores in CORE_COUNTS:
    a = validate(_load('atari_single', 'game=Pong', cores=cores)).actors
    assert counts(a)[:2] >= last
    last = counts(a)[:2]


def test_cores_default_to_the_process_affinity():
  plan = validate(_load('atari_single', 'game=Pong'))
  assert plan.actors.cores == actor_sizing.available_cores()


@pytest.mark.parametrize('field, value', [('actors.num_actors', -1), ('actors.cores', -2),
                                          ('nle.workers', -1), ('envpool.threads', -3)])
def test_negative_counts_are_refused_naming_the_field(field, value):
  config = _load('atari_single', 'game=Pong')
  group, key = field.split('.')
  config[group][key] = value
  with pytest.raises(ConfigError, match=rf'config field {field}: must be a number >= 0'):
    validate(config)


def test_the_start_up_line_says_what_was_chosen_and_why():
  plan = validate(_load('atari_popart', 'games=Pong+Carnival', cores=16))
  assert plan.describe_actors() == (
      'actors: 4 actor threads x 16 envs (8 per task); 2 EnvPool threads per pool '
      '(2 pools per actor, 16 threads in all); policy lag at most about 3 updates '
      '[auto for 16 cores: actors.num_actors, envpool.threads]')
  config = _load('nethack_popart', None, cores=2, num_actors=1)
  config.nle.workers = 2
  plan = validate(config)
  assert plan.describe_actors() == (
      'actors: 1 actor thread x 32 envs (8 per task); 2 NLE worker processes per actor; '
      'policy lag at most about 5 updates [all set by the config]')


def test_envpool_threads_change_speed_not_the_games():
  """The rule gives a run the EnvPool thread count of its machine: each
  env keeps its own emulator and seed, so the frames and rewards are the
  same whatever the count."""
  kwargs = atari.protocol_kwargs(atari.AtariConfig(), 1)   # sticky actions included
  rng = np.random.default_rng(0)
  actions = rng.integers(0, 6, size=(150, 4)).astype(np.int32)
  runs = []
  for threads in (1, 4):
    env = EnvPoolEnv(atari.env_id('Pong'), 4, task_id=0, env_kwargs=kwargs, seed=3,
                     num_threads=threads)
    try:
      out = [env.reset()]
      out += [env.step(a) for a in actions]
    finally:
      env.close()
    runs.append(out)
  for a, b in zip(*runs):
    np.testing.assert_array_equal(a.obs['frames'], b.obs['frames'])
    np.testing.assert_array_equal(a.reward, b.reward)
    np.testing.assert_array_equal(a.terminated, b.terminated)
