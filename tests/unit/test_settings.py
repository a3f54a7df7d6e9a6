"""Typed settings (infra/settings.py): each field's type, default, help and
check in one place; the ml_collections config is generated from them, read
back into them at start-up, and docs/settings.md is generated from them."""

import dataclasses
import os
from typing import Tuple

import ml_collections
import pytest

from configs import common, reference
from configs.validation import ConfigError, read_groups, validate
from configs import cartpole_popart
from infra import settings
from infra.settings import SettingsError, at_least, boolean, integer, one_of, setting, within
from rl import impala, ppo

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclasses.dataclass(frozen=True)
class Toy:
  """A component of two fields and a rule across them."""
  size: int = setting(3, 'how many', integer(1))
  rate: float = setting(0.5, 'how fast', within(0, 1, low_closed=False))
  mode: str = setting('a', "'a' or 'b'", one_of(('a', 'b')))
  on: bool = setting(False, 'whether', boolean)
  extra: dict = setting({'k': 1}, 'a nested group', None)
  names: Tuple[str, ...] = setting((), 'names', None)

  def problem(self):
    if self.mode == 'b' and not self.on:
      return 'mode', "'b' needs on=True"
    return None


def test_config_dict_holds_the_defaults_in_order_with_nested_groups():
  group = settings.config_dict(Toy)
  assert list(group.keys()) == sorted(['size', 'rate', 'mode', 'on', 'extra', 'names'])
  assert (group.size, group.rate, group.mode, group.on) == (3, 0.5, 'a', False)
  assert isinstance(group.extra, ml_collections.ConfigDict) and group.extra.k == 1
  # Each instance gets its own copy of a dict default.
  assert Toy().extra is not Toy().extra


def test_read_gives_a_frozen_instance_of_plain_values():
  group = settings.config_dict(Toy)
  group.size = 5
  group.names = ['x', 'y']
  toy = settings.read(Toy, group, 'toy')
  assert toy == Toy(size=5, names=('x', 'y'))
  assert isinstance(toy.extra, dict) and not isinstance(toy.extra, ml_collections.ConfigDict)
  with pytest.raises(dataclasses.FrozenInstanceError):
    toy.size = 6


def test_a_missing_field_takes_its_default():
  assert settings.read(Toy, {'size': 2}, 'toy') == Toy(size=2)


@pytest.mark.parametrize('values,field,why', [
    ({'size': 0}, 'toy.size', 'must be an integer >= 1, got 0'),
    ({'size': True}, 'toy.size', 'must be an integer >= 1, got True'),
    ({'rate': 0.0}, 'toy.rate', r'must be in \(0, 1\], got 0.0'),
    ({'mode': 'c'}, 'toy.mode', "'c' is not allowed; choose one of a, b"),
    ({'on': 1}, 'toy.on', 'must be True or False, got 1'),
    ({'mode': 'b'}, 'toy.mode', "'b' needs on=True"),
    ({'sise': 4}, 'toy.sise', 'unknown field; allowed: size, rate, mode, on, extra, names'),
])
def test_read_names_the_first_bad_field(values, field, why):
  with pytest.raises(SettingsError, match=f'^config field {field}: {why}$') as e:
    settings.read(Toy, values, 'toy')
  assert e.value.field == field


def test_read_without_check_skips_the_values_but_not_unknown_fields():
  assert settings.read(Toy, {'size': 0}, 'toy', check=False).size == 0
  with pytest.raises(SettingsError, match='toy.sise'):
    settings.read(Toy, {'sise': 0}, 'toy', check=False)


def test_checks_word_their_errors():
  assert at_least(0, ' (0 = off)')(-1) == 'must be a number >= 0 (0 = off), got -1'
  assert at_least(0)(0) is None and at_least(0)(True) is not None
  assert within(0, 1, high_closed=False)(1.0) == 'must be in [0, 1), got 1.0'
  assert settings.positive(0) == 'must be a positive number, got 0'
  assert settings.finite_numbers((1.0, float('nan'))) is not None
  assert settings.texts('ab') is not None and settings.texts(('a', 'b')) is None


def test_every_field_of_every_group_has_a_help_line_and_a_type():
  sections = [('', common.RunConfig)] + list(common.groups())
  for prefix, cls in sections:
    for name, kind, _, help_text in settings.reference(cls, prefix):
      assert help_text.strip(), name
      assert kind, name


def test_base_config_is_generated_from_the_components_defaults():
  """One definition per field: each group of base_config holds exactly its
  settings class's fields, with their defaults."""
  config = common.base_config()
  for name, cls in common.groups():
    assert config[name].to_dict() == {k: (dict(v) if isinstance(v, dict) else v)
                                       for k, v in settings.defaults(cls).items()}, name
  top = {k: v for k, v in config.items() if not isinstance(v, ml_collections.ConfigDict)}
  assert top == settings.defaults(common.RunConfig)
  # The learners' groups come from their settings classes.
  assert settings.read(impala.VTraceConfig, config.vtrace) == impala.VTraceConfig()
  assert settings.read(ppo.PPOConfig, config.ppo) == ppo.PPOConfig()


def test_start_up_reads_every_group_into_its_settings():
  config = cartpole_popart.get_config()
  groups = read_groups(config)
  assert groups[''].batch_size == config.batch_size
  assert groups['network'].name == config.network.name
  assert groups['popart'].enabled is True
  assert groups['actors'].envs_per_actor == config.actors.envs_per_actor


@pytest.mark.parametrize('where,key', [('', 'learning_rat'), ('network', 'lstm'),
                                       ('actors', 'num_actor')])
def test_an_unknown_field_is_refused_at_start_up(where, key):
  config = cartpole_popart.get_config()
  with config.unlocked():
    (config[where] if where else config)[key] = 1
  field = f'{where}.{key}' if where else key
  with pytest.raises(ConfigError, match=f'config field {field}: unknown field; allowed: '):
    validate(config)


def test_the_settings_page_is_generated_from_the_code():
  with open(os.path.join(ROOT, 'docs', 'settings.md')) as f:
    assert f.read() == reference.page(), (
        'docs/settings.md is stale: python -m configs.reference > docs/settings.md')
