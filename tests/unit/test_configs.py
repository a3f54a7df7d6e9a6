"""Configs load, their variants parse, and mistakes stop the run with one line
(the command line's own line: tests/system/test_cli_errors.py)."""

import importlib
import os

import pytest

from analysis import run_loading
from configs import common
from configs.validation import ConfigError, validate
from networks import agent as agent_net
from networks import attention
from tests.support.network_examples import network_settings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = ['cartpole', 'cartpole_popart', 'atari_single', 'atari_multitask', 'atari_popart',
           'nethack_popart']


def _load(name, arg=None):
  return importlib.import_module(f'configs.{name}').get_config(arg)


@pytest.mark.parametrize('name', CONFIGS)
@pytest.mark.parametrize('arg', [None, 'smoke'])
def test_configs_validate(name, arg):
  config = _load(name, arg)
  plan = validate(config)
  assert plan.num_tasks == len(config.tasks)
  assert config.batch_size % len(plan.learner_devices) == 0


def test_defaults_follow_impala():
  c = common.base_config()
  assert (c.unroll_length, c.batch_size, c.discount) == (20, 32, 0.99)
  assert (c.baseline_cost, c.entropy_cost, c.learning_rate) == (0.5, 0.01, 6e-4)
  assert (c.optimizer.rmsprop_eps, c.optimizer.momentum, c.optimizer.max_grad_norm) == (0.01, 0.0, 40.0)
  assert c.wandb.mode == 'offline'


def test_recipes_impala_is_the_default_and_a2c_is_baselines_a2c():
  impala = _load('atari_single', 'game=Pong,recipe=impala')
  assert (impala.unroll_length, impala.batch_size, impala.loss_reduction) == (20, 32, 'sum')
  assert (impala.vtrace.epochs, impala.vtrace.minibatches, impala.network.centre_frames) == (1, 1, False)
  assert impala.total_env_steps == 50_000_000
  a2c = _load('atari_single', 'game=Pong,recipe=a2c')
  assert (a2c.unroll_length, a2c.batch_size, a2c.learning_rate, a2c.loss_reduction) == (5, 16, 7e-4, 'mean')
  o = a2c.optimizer
  assert (o.rmsprop_eps, o.eps_in_sqrt, o.rmsprop_initial_scale, o.max_grad_norm) == (1e-5, True, 1.0, 0.5)
  assert a2c.total_env_steps == 3_000_000
  assert _load('atari_popart', 'recipe=a2c').total_env_steps == 6 * 3_000_000
  with pytest.raises(ValueError, match='unknown recipe.*impala, vtrace, impala_adam, a2c, ppo'):
    _load('atari_single', 'recipe=dqn')


@pytest.mark.parametrize('config,arg,batch,minibatches', [
    ('atari_single', 'game=Pong', 32, 8),               # 2 actors x 16 envs
    ('atari_popart', 'slow_start', 36, 9),              # six games: 12 envs per actor, 3 blocks
    ('atari_multitask', 'games=Pong+Carnival,plain', 32, 8),  # two games: 16 envs per actor
    ('atari_single', 'game=Pong,net=resnet', 32, 8)])
def test_recipe_vtrace_is_the_atari_default(config, arg, batch, minibatches):
  """V-trace with minibatches of about 4 unrolls, normalised advantages and
  centred frames (docs/pong.md)."""
  c = _load(config, arg)
  assert (c.loss.name, c.batch_size, c.unroll_length) == ('impala', batch, 20)
  v = c.vtrace
  assert (v.epochs, v.minibatches, v.normalize_advantages) == (1, minibatches, True)
  o = c.optimizer
  assert (o.name, c.learning_rate, o.adam_eps, o.max_grad_norm) == ('adam', 2.5e-4, 1e-5, 0.5)
  assert (c.loss_reduction, c.entropy_cost, c.baseline_cost) == ('mean', 0.01, 0.5)
  assert (c.network.init, c.network.centre_frames, c.actors.queue_size) == ('orthogonal', True, 1)
  assert not c.actors.wait_for_learner
  assert c.total_env_steps == 3_000_000 * len(c.tasks)
  validate(c)
  assert _load('atari_single', 'game=Pong,net=attention').network.centre_frames


def test_attention_sizes_are_config_fields():
  """The attention agent's sizes are in network.torso_kwargs at the
  network's own defaults, so a flag or a sweep can change them (and a
  misspelt one is refused); the CNNs take no torso arguments."""
  c = _load('atari_single', 'game=Pong,net=attention')
  assert dict(c.network.torso_kwargs) == attention.size_defaults()
  assert attention.size_defaults()['answer_sizes'] == ()
  assert set(attention.size_defaults()) == set(attention.SIZE_FIELDS)
  assert dict(_load('atari_single', 'game=Pong').network.torso_kwargs) == {}
  c.network.torso_kwargs.answer_sizes = (512, 256)
  validate(c)
  net = agent_net.make_network(network_settings(c.network), num_actions=6, num_values=1, num_tasks=1)
  assert dict(net.torso_kwargs)['answer_sizes'] == (512, 256)


def test_attention_sizes_read_back_from_config_json_make_the_same_network(tmp_path):
  """config.json holds tuples as lists; the network made from the config
  read back (analysis/run_loading.load_config, as evaluation does) is the one
  training made (hashable, equal)."""
  c = _load('atari_single', 'game=Pong,net=attention')
  c.network.torso_kwargs.answer_sizes = (32, 24)
  (tmp_path / 'config.json').write_text(c.to_json_best_effort())
  read_back = run_loading.load_config(str(tmp_path))
  make = lambda cfg: agent_net.make_network(network_settings(cfg.network), num_actions=6, num_values=1)
  assert make(read_back) == make(c) and hash(make(read_back)) == hash(make(c))
  assert dict(make(read_back).torso_kwargs)['answer_sizes'] == (32, 24)


@pytest.mark.parametrize('field,value,message', [
    ('answer_sizes', (512, 0), 'answer_sizes must be a tuple of integers > 0'),
    ('num_queries', 0, 'num_queries must be an integer > 0'),
    ('key_size', 64, r'key_size \(64\) must be below conv_lstm_channels \(64\)'),
    ('vision_channels', (32, 64, 64), 'the two vision layers'),
    ('frame_size', 0, 'frame_size must be an integer > 0'),
    ('answer_size', (512,), r"\['answer_size'\] are not attention sizes")])
def test_bad_attention_sizes_are_refused_at_start(field, value, message):
  c = _load('atari_single', 'game=Pong,net=attention')
  with c.network.torso_kwargs.unlocked():
    c.network.torso_kwargs[field] = value
  with pytest.raises(ConfigError, match=r'network\.torso_kwargs.*' + message):
    validate(c)


def test_recipe_impala_adam_is_moolibs_optimisation():
  c = _load('atari_single', 'game=Pong,recipe=impala_adam')
  assert (c.loss.name, c.unroll_length, c.batch_size, c.loss_reduction) == ('impala', 20, 32, 'mean')
  o = c.optimizer
  assert (o.name, c.learning_rate, o.adam_eps, o.max_grad_norm, c.entropy_cost) == ('adam', 6e-4, 1e-8, 40.0, 6e-4)
  assert c.total_env_steps == 3_000_000


def test_recipe_ppo_is_cleanrls_atari_ppo():
  c = _load('atari_single', 'game=Pong,recipe=ppo')
  assert (c.loss.name, c.unroll_length * c.batch_size, c.batch_size) == ('ppo', 1024, 16)
  p = c.ppo
  assert (p.epochs, p.minibatches, p.clip_epsilon, p.gae_lambda, p.value_targets) == (4, 4, 0.1, 0.95, 'gae')
  assert (p.normalize_advantages, p.value_clip_epsilon, p.split) == (True, 0.1, 'steps')
  o = c.optimizer
  assert (o.name, c.learning_rate, o.adam_eps, o.max_grad_norm) == ('adam', 2.5e-4, 1e-5, 0.5)
  assert (c.loss_reduction, c.entropy_cost, c.network.init, c.actors.queue_size) == ('mean', 0.01, 'orthogonal', 1)
  assert c.actors.wait_for_learner
  assert c.total_env_steps == 3_000_000
  validate(c)
  six = _load('atari_popart', 'recipe=ppo')   # 12 envs per actor: 12 x 84 steps
  assert six.batch_size == 12 and six.unroll_length == 84
  validate(six)


@pytest.mark.parametrize('arg,batch', [('games=Pong+Breakout+Seaquest,lstm', 12),
                                       ('games=Pong+Breakout+Seaquest,net=attention', 12),
                                       ('games=Pong,lstm', 16), ('lstm', 12)])
def test_recipe_ppo_with_a_recurrent_network_splits_into_whole_unrolls(arg, batch):
  """Minibatches of whole unrolls: the recipe's batch must split into 4."""
  c = _load('atari_popart', arg + ',recipe=ppo')
  assert (c.ppo.split, c.batch_size, c.batch_size % c.actors.envs_per_actor) == ('unrolls', batch, 0)
  c.num_learner_devices = 1
  validate(c)
  smoke = _load('atari_popart', arg + ',recipe=ppo,smoke')
  assert smoke.ppo.minibatches == 1
  validate(smoke)


def test_every_config_field_is_commented():
  """Each assignment in base_config carries a comment saying what it is."""
  source = open(os.path.join(ROOT, 'configs', 'common.py')).read()
  body = source[source.index('def base_config'):source.index('RECIPES = ')]
  for line in body.splitlines():
    stripped = line.strip()
    if stripped.startswith('c.') and '=' in stripped and 'ConfigDict()' not in stripped:
      assert '#' in stripped, f'uncommented config field: {stripped}'


def test_variant_parsing():
  v = common.parse_variant('game=Breakout,smoke,games=Pong+Breakout,n=3',
                           {'game': 'Pong', 'smoke': False, 'games': (), 'n': 1})
  assert v == {'game': 'Breakout', 'smoke': True, 'games': ('Pong', 'Breakout'), 'n': 3}
  with pytest.raises(ValueError, match='allowed: game'):
    common.parse_variant('gmae=Pong', {'game': 'Pong'})


@pytest.mark.parametrize('raw,value', [('on', True), ('TRUE', True), ('1', True), ('yes', True),
                                       ('off', False), ('False', False), ('0', False), ('no', False)])
def test_boolean_variant_words(raw, value):
  assert common.parse_variant(f'smoke={raw}', {'smoke': not value}) == {'smoke': value}


@pytest.mark.parametrize('raw', ['maybe', '', 'ture', '2'])
def test_boolean_variant_that_is_not_a_boolean_is_refused(raw):
  # Before, any word but 1/true/yes/on meant False: ':smoke=maybe' started the full run.
  with pytest.raises(ValueError, match=f"'smoke' is a boolean.*not '{raw}'"):
    common.parse_variant(f'smoke={raw}', {'smoke': False})


def test_nethack_variants_choose_task_and_characters():
  c = _load('nethack_popart', 'task=Staircase,chars=val-dwa-law-fem+wiz-elf-cha-mal')
  assert [t['env_id'] for t in c.tasks] == ['NetHackStaircase-v0'] * 2
  assert [t['env_kwargs']['character'] for t in c.tasks] == ['val-dwa-law-fem', 'wiz-elf-cha-mal']


def test_nethack_recipes():
  fast = _load('nethack_popart')
  assert (fast.network.name, fast.network.lstm_size) == ('nle_fast', 512)
  assert (fast.learning_rate, fast.optimizer.rmsprop_eps, fast.popart.beta) == (2e-4, 1e-6, 3e-3)
  assert (fast.entropy_cost, fast.discount, fast.unroll_length, fast.batch_size) == (1e-3, 0.999, 20, 32)
  # recipe=impala: IMPALA's Atari table, as base_config has it.
  impala, base = _load('nethack_popart', 'recipe=impala'), common.base_config()
  for field in ('learning_rate', 'entropy_cost', 'discount', 'unroll_length'):
    assert impala[field] == base[field]
  assert (impala.optimizer.rmsprop_eps, impala.popart.beta) == (0.01, 3e-4)
  # recipe=nle: NLE's published TorchBeast agent, with its network.
  nle = _load('nethack_popart', 'recipe=nle,net=nle_baseline')
  assert (nle.learning_rate, nle.optimizer.rmsprop_eps, nle.entropy_cost) == (2e-4, 1e-6, 1e-4)
  assert (nle.discount, nle.unroll_length, nle.batch_size, nle.optimizer.max_grad_norm) == (0.999, 80, 32, 40.0)
  assert (nle.network.name, nle.popart.beta) == ('nle_baseline', 3e-4)
  with pytest.raises(ValueError, match="unknown recipe 'adam'; choose one of fast, impala, nle"):
    _load('nethack_popart', 'recipe=adam')


def test_nethack_popart_off_is_the_same_agent_with_one_shared_value_output():
  on, off = _load('nethack_popart'), _load('nethack_popart', 'popart=false')
  assert on.popart.enabled and not off.popart.enabled
  assert off.reward_mode == on.reward_mode == 'none'  # unclipped either way
  assert validate(off).num_values == 1 and validate(on).num_values == 4
  for field in ('learning_rate', 'entropy_cost', 'discount', 'tasks', 'network', 'batch_size'):
    assert off[field] == on[field], field


def test_reward_scales_override_is_a_tuple():
  c = _load('cartpole_popart')
  assert tuple(c.reward_scales) == (1.0, 1000.0)


@pytest.mark.parametrize('field,value,match', [
    ('batch_size', 0, 'batch_size'),
    ('unroll_length', -3, 'unroll_length'),
    ('total_env_steps', 0, 'total_env_steps'),
    ('reward_mode', 'clipped', 'reward_mode.*clip, none, h'),
    ('network.name', 'resnet50', 'network.name.*mlp'),
    ('wandb.mode', 'cloud', 'wandb.mode.*offline'),
    ('tasks', (), 'tasks'),
    ('reward_scales', (1.0, 2.0, 3.0), 'reward_scales'),
    ('num_learner_devices', 64, 'num_learner_devices'),
    ('batch_size', 12, 'batch_size'),
    ('network.name', 'shallow', 'network.name.*frames'),
    ('loss_reduction', 'average', 'loss_reduction.*sum, mean'),
    ('optimizer.rmsprop_initial_scale', -1.0, 'optimizer.rmsprop_initial_scale'),
    ('loss.name', 'a3c', 'loss.name.*impala, ppo'),
    ('optimizer.name', 'sgd', 'optimizer.name.*rmsprop, adam'),
    ('optimizer.adam_eps', 0.0, 'optimizer.adam_eps'),
    ('optimizer.adam_b2', 1.0, r'optimizer.adam_b2.*\[0, 1\)'),
    ('network.init', 'xavier', 'network.init.*lecun, orthogonal'),
    ('ppo.epochs', 0, 'ppo.epochs.*integer >= 1'),
    ('ppo.minibatches', -2, 'ppo.minibatches'),
    ('ppo.clip_epsilon', 0.0, 'ppo.clip_epsilon'),
    ('ppo.value_clip_epsilon', -0.1, 'ppo.value_clip_epsilon'),
    ('ppo.gae_lambda', 1.5, r'ppo.gae_lambda.*\[0, 1\]'),
    ('ppo.value_targets', 'td', 'ppo.value_targets.*gae, vtrace'),
    ('ppo.split', 'envs', 'ppo.split.*steps, unrolls'),
    ('vtrace.epochs', 0, 'vtrace.epochs.*integer >= 1'),
    ('vtrace.minibatches', -1, 'vtrace.minibatches.*integer >= 1'),
    ('network.centre_frames', True, "network.centre_frames.*'mlp'"),
    ('popart.start', 'warm', 'popart.start.*identity, debiased'),
    ('optimizer.clip_by', 'layer', 'optimizer.clip_by.*global, term'),
    ('optimizer.warmup_updates', -1, 'optimizer.warmup_updates.*integer >= 0'),
    ('optimizer.anneal_to', 1.5, r'optimizer.anneal_to.*\[0, 1\]'),
    ('vtrace.normalize_advantages_per', 'batch',
     'vtrace.normalize_advantages_per.*minibatch, task'),
    ('vtrace.normalize_advantages_per', 'task', 'vtrace.normalize_advantages_per.*needs '
     'vtrace.normalize_advantages=True'),
    ('vtrace.balance_tasks', True, 'vtrace.balance_tasks.*needs vtrace.minibatches > 1'),
    ('log.task_gradients_seconds', -1.0, 'log.task_gradients_seconds'),
    ('pause_at_env_steps', 10**12, 'pause_at_env_steps.*past total_env_steps'),
])
def test_bad_fields_raise_config_error_naming_the_field(field, value, match):
  config = _load('cartpole_popart')
  group, _, leaf = field.rpartition('.')
  with config.unlocked():
    (config[group] if group else config)[leaf] = value
  with pytest.raises(ConfigError, match=match):
    validate(config)


def test_ppo_minibatches_must_split_each_devices_shard():
  config = _load('cartpole')      # 16 unrolls of 20 steps, on 1 learner device
  config.num_learner_devices = 1
  config.loss.name = 'ppo'
  config.ppo.split = 'unrolls'
  config.ppo.minibatches = 3
  with pytest.raises(ConfigError, match='ppo.minibatches.*16 unrolls'):
    validate(config)
  config.ppo.split = 'steps'
  config.ppo.minibatches = 7
  with pytest.raises(ConfigError, match='ppo.minibatches.*320 steps'):
    validate(config)
  config.ppo.minibatches = 8
  validate(config)


def test_vtrace_minibatches_must_split_each_devices_unrolls():
  config = _load('cartpole')      # 16 unrolls, on 2 learner devices: 8 each
  config.num_learner_devices = 2
  config.vtrace.minibatches = 16
  with pytest.raises(ConfigError, match='vtrace.minibatches.*8 unrolls of each learner device'):
    validate(config)
  config.vtrace.minibatches = 4
  validate(config)
  config.loss.name = 'ppo'        # read only by the V-trace loss
  config.vtrace.minibatches = 16
  validate(config)


def test_ppo_steps_split_needs_a_feed_forward_network():
  config = _load('cartpole')
  config.loss.name = 'ppo'
  config.network.lstm_size = 32
  with pytest.raises(ConfigError, match="ppo.split.*use 'unrolls'"):
    validate(config)
  config.ppo.split = 'unrolls'
  validate(config)


def test_unknown_env_id_names_the_task_field():
  config = _load('cartpole')
  config.tasks = (common.task('x', 'CartPoel-v1'),)
  with pytest.raises(ConfigError, match=r'tasks\[0\].env_id.*CartPoel-v1'):
    validate(config)


def test_bad_env_kwargs_list_the_allowed_keys():
  config = _load('atari_single', 'game=Pong')
  config.tasks = (common.task('Pong', 'Pong-v5', episodic_lives=True),)
  with pytest.raises(ConfigError, match='allowed keys:.*episodic_life'):
    validate(config)


def test_batch_must_divide_over_learner_devices():
  config = _load('cartpole')
  config.batch_size = 8
  config.actors.envs_per_actor = 2
  config.num_learner_devices = 3
  with pytest.raises(ConfigError, match='divisible by the 3 learner devices'):
    validate(config)


@pytest.mark.parametrize('arg,batch,minibatches', [
    ('', 36, 3),                              # six games: 36 / (2 x 6) = 3 minibatches of 12
    ('games=Pong+Carnival', 32, 8),           # two: 2 x 2 = 4 unrolls each, 32 / 4 = 8
    ('games=Pong+Breakout+Seaquest', 36, 9),  # three: 6 each wanted, but 4 learner devices hold
                                              # 9 unrolls: 3 or 9 minibatches; 4 is nearer 6 than 12
    ('games=Pong', 32, 8)])                   # one: at least about 4 unrolls, as vtrace
def test_multitask_popart_without_the_slow_start_is_the_atari_popart_default(arg, batch,
                                                                               minibatches):
  """[21]: the debiased start, the clip per term, advantages per task,
  balanced minibatches of about two unrolls of every game, 5e-4 after 200
  warmup updates, annealed to half (docs/popart_atari.md)."""
  c = _load('atari_popart', arg)
  assert (c.batch_size, c.vtrace.minibatches, c.vtrace.balance_tasks) == (batch, minibatches, True)
  assert (c.popart.start, c.optimizer.clip_by, c.vtrace.normalize_advantages_per) == (
      'debiased', 'term', 'task')
  o = c.optimizer
  assert (c.learning_rate, o.warmup_updates, o.anneal_to) == (5e-4, 200, 0.5)
  assert (o.name, o.max_grad_norm, c.entropy_cost, c.baseline_cost) == ('adam', 0.5, 0.01, 0.5)
  validate(c)
  # Every two-game unroll count splits into the balanced minibatches evenly.
  two = _load('atari_popart', 'games=Pong+Carnival')
  assert two.batch_size // two.vtrace.minibatches == 2 * len(two.tasks)


def test_slow_start_smoke_and_other_recipes_leave_the_multitask_popart_settings_out():
  slow = _load('atari_popart', 'slow_start')
  assert (slow.popart.start, slow.optimizer.clip_by, slow.vtrace.normalize_advantages_per) == (
      'identity', 'global', 'minibatch')
  assert (slow.learning_rate, slow.optimizer.warmup_updates, slow.optimizer.anneal_to) == (
      2.5e-4, 0, 0.0)
  assert not slow.vtrace.balance_tasks
  assert slow.total_env_steps == _load('atari_popart', '').total_env_steps == 18_000_000
  for recipe in ('impala', 'ppo', 'a2c', 'impala_adam'):
    other = _load('atari_popart', f'recipe={recipe}')
    assert (other.popart.start, other.optimizer.clip_by) == ('identity', 'global'), recipe
    assert not other.vtrace.balance_tasks, recipe
    validate(other)
  smoke = _load('atari_popart', 'games=Pong+Carnival,smoke')   # one minibatch: nothing to balance
  assert (smoke.vtrace.minibatches, smoke.vtrace.balance_tasks, smoke.popart.start) == (
      1, False, 'debiased')
  validate(smoke)
  # The clipped arm is tuned alike ([26]), without PopArt's start; `plain`
  # keeps the vtrace recipe's table.
  clipped = _load('atari_multitask', 'games=Pong+Carnival')
  popart_arm = _load('atari_popart', 'games=Pong+Carnival')
  shared = lambda c: (c.learning_rate, c.optimizer.warmup_updates, c.optimizer.anneal_to,
                      c.optimizer.clip_by, c.vtrace.normalize_advantages_per,
                      c.vtrace.minibatches, c.vtrace.balance_tasks, c.batch_size,
                      c.total_env_steps)
  assert shared(clipped) == shared(popart_arm)
  assert (clipped.popart.enabled, clipped.popart.start, clipped.reward_mode) == (
      False, 'identity', 'clip')
  validate(clipped)
  plain = _load('atari_multitask', 'games=Pong+Carnival,plain')
  assert (plain.popart.start, plain.learning_rate, plain.vtrace.balance_tasks,
          plain.optimizer.clip_by) == ('identity', 2.5e-4, False, 'global')


def test_multitask_rewards_and_steps_per_game_variants():
  b = _load('atari_multitask', 'games=Pong+Carnival,rewards=none,steps=1500000')
  assert (b.reward_mode, b.popart.enabled, b.total_env_steps) == ('none', False, 3_000_000)
  assert b.config_name == 'atari_multitask_unclipped'
  c = _load('atari_multitask', 'games=Pong+Carnival,steps=1500000')
  assert (c.reward_mode, c.popart.enabled, c.total_env_steps) == ('clip', False, 3_000_000)
  a = _load('atari_popart', 'games=Pong+Carnival,steps=1500000')
  assert (a.reward_mode, a.popart.enabled, a.total_env_steps) == ('none', True, 3_000_000)
  assert _load('atari_single', 'game=Carnival,steps=1500000').total_env_steps == 1_500_000
  with pytest.raises(ValueError, match="unknown rewards='h'; choose one of clip, none"):
    _load('atari_multitask', 'rewards=h')
  with pytest.raises(ValueError, match='steps=-5'):
    _load('atari_single', 'steps=-5')


def test_debiased_start_needs_popart_and_clip_per_term_needs_vtrace():
  config = _load('cartpole')
  config.popart.start = 'debiased'
  with pytest.raises(ConfigError, match='popart.start.*needs popart.enabled=True'):
    validate(config)
  config = _load('cartpole')
  config.loss.name = 'ppo'
  config.optimizer.clip_by = 'term'
  with pytest.raises(ConfigError, match="optimizer.clip_by.*'term' is implemented for "
                     "loss.name='impala'"):
    validate(config)
