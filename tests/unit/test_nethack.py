"""Tests for envs/nethack.py (characters and NetHack's rules) and the chars
variants of configs/nethack_popart.py."""

import pytest

from configs import nethack_popart
from configs.validation import validate
from envs import nethack
from envs.nethack import Character, parse_character


def test_valid_characters_parse():
  assert parse_character('val-dwa-law-fem') == Character('val', 'dwa', 'law', 'fem')
  assert str(parse_character(' Wiz-Elf-Cha-Mal ')) == 'wiz-elf-cha-mal'
  assert parse_character('@') is None
  for c in nethack.CHARACTERS:
    assert parse_character(str(c)) == c
  for ch in nethack_popart.DEFAULT_CHARS:
    parse_character(ch)


def test_rules_of_role_c():
  """Counts by hand from NetHack 3.6's role.c; checked against NLE itself,
  which deals another character for each of the 317 impossible ones."""
  per_role = {r: sum(c.role == r for c in nethack.CHARACTERS) for r in nethack.ROLES}
  assert per_role == {'arc': 8, 'bar': 6, 'cav': 8, 'hea': 4, 'kni': 2, 'mon': 6, 'pri': 8,
                      'ran': 10, 'rog': 4, 'sam': 2, 'tou': 2, 'val': 3, 'wiz': 10}
  assert len(nethack.CHARACTERS) == 73
  assert {c.gender for c in nethack.CHARACTERS if c.role == 'val'} == {'fem'}
  for c in nethack.CHARACTERS:  # races' own alignments
    assert c.alignment == {'elf': 'cha', 'dwa': 'law', 'gno': 'neu', 'orc': 'cha'}.get(
        c.race, c.alignment)
  assert len(nethack.ROLES) == 13 and nethack.ROLES[0] == 'arc' and nethack.ROLES[-1] == 'wiz'


@pytest.mark.parametrize('spec,match', [
    ('vak-hum-neu-mal', "unknown role 'vak' in 'vak-hum-neu-mal'; roles: arc, bar, cav, hea, "
                        'kni, mon, pri, ran, rog, sam, tou, val, wiz'),
    ('val-hmn-law-fem', "unknown race 'hmn' in 'val-hmn-law-fem'; races: hum, elf, dwa, gno, orc"),
    ('val-hum-good-fem', "unknown alignment 'good' .*; alignments: law, neu, cha"),
    ('val-hum-law-f', "unknown gender 'f' .*; genders: mal, fem"),
    ('val-dwa', "must be 'role-race-alignment-gender'"),
    ('', "must be 'role-race-alignment-gender'"),
])
def test_unknown_part_is_named_with_the_choices(spec, match):
  with pytest.raises(ValueError, match=match):
    parse_character(spec)


@pytest.mark.parametrize('spec,match', [
    ('kni-elf-law-mal', "impossible character 'kni-elf-law-mal': a Knight must be human "
                        r'\(possible Knights: kni-hum-law-mal, kni-hum-law-fem\)'),
    ('val-hum-neu-mal', 'a Valkyrie must be female'),
    ('wiz-hum-law-mal', 'a Wizard must be neutral or chaotic'),
    ('arc-elf-cha-fem', 'an Archeologist must be human, dwarf or gnome'),
    ('arc-dwa-neu-mal', 'a dwarf must be lawful'),
    ('pri-elf-law-fem', 'an elf must be chaotic'),
    ('hea-gno-law-mal', 'a Healer must be neutral'),
])
def test_impossible_combination_says_which_rule(spec, match):
  with pytest.raises(ValueError, match=match):
    parse_character(spec)


def test_role_of_monster():
  assert nethack.role_of_monster('cavewoman') == 'cav'
  assert nethack.role_of_monster('priestess') == 'pri'
  assert nethack.role_of_monster('valkyrie') == 'val'
  assert nethack.role_of_monster('newt') is None


def test_role_task_ids():
  ids = nethack.role_task_ids({r: 12 - i for i, r in enumerate(nethack.ROLES)})
  assert ids == tuple(range(12, -1, -1))
  assert nethack.role_task_ids({'any-character': 3}) is None  # one task pools all roles
  with pytest.raises(ValueError, match='missing: wiz'):
    nethack.role_task_ids({r: i for i, r in enumerate(nethack.ROLES[:-1])})
  with pytest.raises(ValueError, match='unknown: Archeologist'):
    nethack.role_task_ids({'Archeologist': 0, 'bar': 1})


def test_random_characters_config_has_one_task_per_role():
  c = nethack_popart.get_config('chars=@')
  assert [t['name'] for t in c.tasks] == list(nethack.ROLES)
  assert {t['env_kwargs']['character'] for t in c.tasks} == {'@'}
  assert c.actors.envs_per_actor == c.batch_size == 13 * nethack_popart.ENVS_PER_ROLE
  plan = validate(c)
  assert plan.task_names == nethack.ROLES and plan.num_values == 13
  smoke = nethack_popart.get_config('chars=@,smoke')
  assert validate(smoke).num_tasks == 13


def test_fixed_characters_are_canonical():
  c = nethack_popart.get_config('chars=Val-Dwa-Law-Fem+wiz-elf-cha-mal')
  assert [t['name'] for t in c.tasks] == ['val-dwa-law-fem', 'wiz-elf-cha-mal']
  assert [t['env_kwargs']['character'] for t in c.tasks] == ['val-dwa-law-fem', 'wiz-elf-cha-mal']


@pytest.mark.parametrize('chars,match', [
    ('vak-hum-neu-mal', "unknown role 'vak'"),
    ('val-dwa-law-fem+kni-elf-law-mal', 'a Knight must be human'),
    ('@+val-dwa-law-fem', 'cannot be mixed'),
    ('val-dwa-law-fem+val-dwa-law-fem', 'given twice'),
])
def test_bad_chars_variant_raises(chars, match):
  with pytest.raises(ValueError, match=match):
    nethack_popart.get_config(f'chars={chars}')


def test_random_characters_log_episodes_under_the_role_dealt(tmp_path):
  """chars=@ end to end: each env's task id is the role of its current game."""
  from configs import nethack_popart
  from envs import registry
  config = nethack_popart.get_config('chars=@,smoke')
  plan = validate(config)
  assert all(g.role_task_ids == tuple(range(13)) for g in plan.actor_env_groups[0])
  env = registry.make_actor_envs(plan.actor_env_groups[0], seed=5, resources={'nle': {'workers': 1}},
                                 settings=registry.default_settings(),
                                 observation_keys=plan.observation_keys)
  try:
    result = env.reset()
    roles = {int(t) for t in result.task_id}
    assert roles <= set(range(13)) and len(roles) > 1  # 26 random games, several roles
  finally:
    env.close()
  with pytest.raises(Exception, match=r'tasks\[0\].env_kwargs.character'):
    bad = nethack_popart.get_config('smoke')
    bad.tasks = ({**bad.tasks[0], 'env_kwargs': {'character': 'kni-elf-law-mal'}},)
    validate(bad)
