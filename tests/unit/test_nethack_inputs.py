"""The NLE torsos' extra inputs (network.extra_inputs): the message line and
the glyph under the hero. The tracker by hand, the env's shapes, the
encoder's reach, the fast path against its reference, the config checks."""


import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

import nle.nethack
from configs import nethack_popart, validation
from envs.nle_env import NLEBatchedEnv
from envs.nle_worker import DERIVED_OBS, UnderHero, observation_desc
from networks import agent as agent_net
from networks import nethack, torsos
from tests.support.network_examples import network_settings

H, W = nle.nethack.DUNGEON_SHAPE
NO_GLYPH = nle.nethack.NO_GLYPH
DOWNSTAIRS = nle.nethack.GLYPH_CMAP_OFF + 24  # S_dnstair
FLOOR = nle.nethack.GLYPH_CMAP_OFF + 19      # S_room
HERO = 337                                    # a monster glyph (the hero's @)


def _blstats(x, y, depth=1):
  bl = np.zeros(nle.nethack.BLSTATS_SHAPE, np.int64)
  bl[nle.nethack.NLE_BL_X], bl[nle.nethack.NLE_BL_Y] = x, y
  bl[nle.nethack.NLE_BL_DEPTH] = depth
  return bl


def _map(hero, stairs=None):
  g = np.full((H, W), FLOOR, np.int16)
  if stairs is not None:
    g[stairs[1], stairs[0]] = DOWNSTAIRS
  g[hero[1], hero[0]] = HERO
  return g


# ---- The glyph under the hero, by hand.

def test_under_hero_follows_the_previous_map():
  u = UnderHero()
  assert u.reset(_map((5, 5), stairs=(6, 5)), _blstats(5, 5)) == NO_GLYPH  # unknown at start
  # The hero steps east onto the stairs it saw: the staircase is under it.
  assert u.step(_map((6, 5)), _blstats(6, 5)) == DOWNSTAIRS
  # It stays (searches): still the staircase, though the map shows the hero.
  assert u.step(_map((6, 5)), _blstats(6, 5)) == DOWNSTAIRS
  # It steps off onto floor.
  assert u.step(_map((7, 5), stairs=(6, 5)), _blstats(7, 5)) == FLOOR
  # Down a level: the square it arrives on was never seen from there.
  assert u.step(_map((30, 10)), _blstats(30, 10, depth=2)) == NO_GLYPH
  # The game ends (NLE blanks blstats): the last value stays.
  assert u.step(np.zeros((H, W), np.int16), np.zeros(nle.nethack.BLSTATS_SHAPE, np.int64)) == NO_GLYPH
  u.step(_map((31, 10), stairs=(30, 10)), _blstats(31, 10, depth=2))
  assert u.step(_map((30, 10)), _blstats(30, 10, depth=2)) == DOWNSTAIRS
  # A new game forgets.
  assert u.reset(_map((1, 1)), _blstats(1, 1)) == NO_GLYPH


def test_observation_desc_knows_derived_and_nle_keys():
  assert observation_desc('under_hero') == ((), np.dtype(np.int16))
  assert observation_desc('message') == ((256,), np.dtype(np.uint8))
  assert set(DERIVED_OBS) == {'under_hero'}


# ---- Through the batched env.

def test_env_gives_message_and_under_hero():
  env = NLEBatchedEnv('NetHackScore-v0', 2, task_ids=[0, 1], env_kwargs=[{}] * 2,
                      observation_keys=('glyphs', 'blstats', 'message', 'under_hero'),
                      num_workers=1)
  try:
    assert env.observation_spec['under_hero'] == ((), np.dtype(np.int16))
    assert env.observation_spec['message'] == ((256,), np.dtype(np.uint8))
    res = env.reset()
    assert res.obs['under_hero'].shape == (2,) and res.obs['message'].shape == (2, 256)
    assert (res.obs['under_hero'] == NO_GLYPH).all()
    rng = np.random.default_rng(0)
    moves = list(range(8))  # NetHackScore's first 8 actions: the compass moves
    seen, messages = set(), 0
    prev = res.obs
    for _ in range(200):
      res = env.step(rng.choice(moves, size=2))
      for i in range(2):
        bl, pbl = res.obs['blstats'][i], prev['blstats'][i]
        moved = (bl[0], bl[1]) != (pbl[0], pbl[1])
        same_level = bl[nle.nethack.NLE_BL_DEPTH] == pbl[nle.nethack.NLE_BL_DEPTH] != 0
        if moved and same_level and not (res.terminated[i] or res.truncated[i]):
          # Under the hero is what the previous map showed where it now stands.
          assert res.obs['under_hero'][i] == prev['glyphs'][i, bl[1], bl[0]]
          seen.add(int(res.obs['under_hero'][i]))
      messages += int((res.obs['message'][:, 0] != 0).sum())
      prev = {k: v.copy() for k, v in res.obs.items()}
    assert seen and NO_GLYPH not in seen
    assert messages > 0
  finally:
    env.close()


# ---- The torso.

def _obs(n, message=b'', under=NO_GLYPH, seed=0):
  rng = np.random.default_rng(seed)
  glyphs = rng.integers(0, nethack.NLE_NUM_GLYPHS, (n, H, W)).astype(np.int16)
  blstats = rng.integers(0, 20, (n, 27)).astype(np.int64)
  msg = np.zeros((n, 256), np.uint8)
  msg[:, :len(message)] = np.frombuffer(message, np.uint8)
  return {'glyphs': glyphs, 'blstats': blstats, 'message': msg,
          'under_hero': np.full((n,), under, np.int16)}


@pytest.fixture(scope='module')
def torso_and_params():
  torso = torsos.get('nle_fast').module(extra_inputs=('message', 'under_hero'), hidden_size=32)
  params = torso.init(jax.random.key(0), _obs(2))['params']
  return torso, params


def test_extra_inputs_add_their_encoders(torso_and_params):
  _, params = torso_and_params
  shapes = jax.tree.map(jnp.shape, params)
  assert shapes['message_embed']['embedding'] == (256, 16)
  assert shapes['message_conv0']['kernel'] == (5, 16, 32)
  assert shapes['message_conv1']['kernel'] == (5, 32, 64)
  plain = torsos.get('nle_fast').module(hidden_size=32).init(jax.random.key(0), _obs(2))['params']
  # fc0 reads 64 message features and the 32-wide embedded glyph under the hero more.
  assert shapes['fc0']['kernel'][0] == plain['fc0']['kernel'].shape[0] + 64 + 32
  assert 'message_embed' not in plain


def test_a_message_naming_stairs_reaches_the_encoder(torso_and_params):
  torso, params = torso_and_params
  stairs = torso.apply({'params': params}, _obs(2, b'There is a staircase down here.'))
  blank = torso.apply({'params': params}, _obs(2))
  other = torso.apply({'params': params}, _obs(2, b'You see here a dagger.'))
  assert stairs.shape == (2, 32)
  assert float(jnp.abs(stairs - blank).max()) > 1e-4
  assert float(jnp.abs(stairs - other).max()) > 1e-4

  # The gradient reaches the embedding rows of the message's characters
  # and of no character the message lacks (beyond the padding's 0).
  def out(p):
    return torso.apply({'params': p}, _obs(2, b'There is a staircase down here.')).sum()
  g = np.asarray(jax.grad(out)(params)['message_embed']['embedding'])
  used = set(b'There is a staircase down here.') | {0}
  touched = {c for c in range(256) if np.abs(g[c]).max() > 0}
  assert touched <= used and set(b'staircase') <= touched


def test_the_glyph_under_the_hero_reaches_the_fc(torso_and_params):
  torso, params = torso_and_params
  on_stairs = torso.apply({'params': params}, _obs(2, under=DOWNSTAIRS))
  on_floor = torso.apply({'params': params}, _obs(2, under=FLOOR))
  assert float(jnp.abs(on_stairs - on_floor).max()) > 1e-4


@pytest.mark.parametrize('name', ['nle_fast', 'nle_baseline'])
def test_fast_path_equals_reference_with_extra_inputs(name):
  fast, ref = (torsos.get(name).module(reference=r, hidden_size=32,
                                   extra_inputs=('message', 'under_hero')) for r in (False, True))
  obs = _obs(3, b'There is a staircase down here.', under=DOWNSTAIRS, seed=1)
  params = fast.init(jax.random.key(1), obs)['params']
  assert (jax.tree.map(jnp.shape, params)
          == jax.tree.map(jnp.shape, jax.eval_shape(ref.init, jax.random.key(0), obs)['params']))

  def loss(module, p):
    return module.apply({'params': p}, obs)

  yf, yr = loss(fast, params), loss(ref, params)
  np.testing.assert_allclose(np.asarray(yf), np.asarray(yr), rtol=0,
                             atol=1e-5 * float(jnp.abs(yr).max()))
  # Jitted: compiled once, not dispatched op by op (a few seconds less).
  gf = jax.jit(jax.grad(lambda p: loss(fast, p).sum()))(params)
  gr = jax.jit(jax.grad(lambda p: loss(ref, p).sum()))(params)
  for a, b in zip(jax.tree.leaves(gf), jax.tree.leaves(gr)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0,
                               atol=1e-4 * max(float(jnp.abs(b).max()), 1e-6))


def test_agent_network_passes_the_extra_inputs_through():
  cfg = ml_collections.ConfigDict({'name': 'nle_fast', 'lstm_size': 0, 'core_extra_inputs': False,
                                   'torso_kwargs': {'hidden_size': 32},
                                   'extra_inputs': ('message', 'under_hero')})
  net = agent_net.make_network(network_settings(cfg), num_actions=23, num_values=4)
  example = jax.tree.map(lambda x: x[0], _obs(1))
  variables = agent_net.init_variables(net, jax.random.key(0), example)
  obs = jax.tree.map(lambda x: x[None], _obs(2, b'There is a staircase down here.'))
  logits, values, _ = net.apply(variables, obs, np.zeros((1, 2), bool), ())
  assert logits.shape == (1, 2, 23) and values.shape == (1, 2, 4)
  assert 'message_embed' in variables['params']['torso']
  # Runs saved before the field existed build the plain network.
  del cfg['extra_inputs']
  assert agent_net.make_network(network_settings(cfg), 23, 4).extra_inputs == ()


# ---- The config.

def test_main_job_reads_the_new_inputs_by_default():
  c = nethack_popart.get_config()
  assert c.network.extra_inputs == ('message', 'under_hero')
  assert nethack_popart.get_config('inputs=').network.extra_inputs == ()
  assert nethack_popart.get_config('inputs=message').network.extra_inputs == ('message',)
  assert nethack_popart.get_config('net=nle_simple').network.extra_inputs == ()
  with pytest.raises(ValueError, match='inputs='):
    nethack_popart.get_config('net=nle_simple,inputs=message')


@pytest.mark.parametrize('value, match', [
    (('message', 'glyph_under'), "'glyph_under' is not allowed"),
    (('message', 'message'), 'twice'),
])
def test_bad_extra_inputs_are_named_at_start_up(value, match):
  c = nethack_popart.get_config()
  c.network.extra_inputs = value
  with pytest.raises(validation.ConfigError, match=match) as e:
    validation.validate(c)
  assert e.value.field == 'network.extra_inputs'


def test_extra_inputs_need_a_network_that_reads_them():
  c = nethack_popart.get_config('net=nle_simple')
  c.network.extra_inputs = ('message',)
  with pytest.raises(validation.ConfigError, match='reads no extra inputs') as e:
    validation.validate(c)
  assert e.value.field == 'network.extra_inputs'
