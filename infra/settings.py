"""Typed settings: each component's frozen dataclass holds every field's type,
default, one-line help and check, beside the code that reads it:

  beta: float = setting(3e-4, 'step size of the moments', within(0, 1, low_closed=False))

plus an optional `problem()` method for checks across fields. A check maps a
value to None (allowed) or a phrase saying why not ('must be a positive number, got 0').
"""

import dataclasses
import math
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Type

import ml_collections

Check = Callable[[Any], Optional[str]]
Problem = Tuple[str, str]   # (field, why)


def setting(default, help: str, check: Optional[Check] = None,  # noqa: A002 (argparse's name)
            frozen: bool = False):
  """One settings field: a dataclasses field with `help`, `check` and `frozen` in its metadata.

  Args:
    default: its default (a dict becomes a nested group, copied per instance).
    help: one line saying what it does.
    check: value -> None or why the value is refused; None: any value.
    frozen: fixed for a run's life: a resumed run must keep its saved value
      (the parameters' shapes, the tasks, the optimiser state's structure).
  """
  metadata = {'help': help, 'check': check, 'frozen': frozen}
  if isinstance(default, dict):
    return dataclasses.field(default_factory=lambda: dict(default), metadata=metadata)
  return dataclasses.field(default=default, metadata=metadata)


def frozen_setting(default, help: str, check: Optional[Check] = None):  # noqa: A002
  """A `setting` fixed for a run's life (frozen=True)."""
  return setting(default, help, check, frozen=True)


def is_frozen(cls, name: str) -> bool:
  """Whether field `name` of settings class `cls` is frozen (False for none)."""
  field = next((f for f in _fields(cls) if f.name == name), None)
  return bool(field is not None and field.metadata.get('frozen'))


def _fields(cls) -> Tuple[dataclasses.Field, ...]:
  if not dataclasses.is_dataclass(cls):
    raise TypeError(f'{cls!r} is not a settings dataclass')
  return dataclasses.fields(cls)


def _default(field: dataclasses.Field):
  if field.default is not dataclasses.MISSING:
    return field.default
  return field.default_factory()


def defaults(cls) -> Dict[str, Any]:
  """Each field's default, in declaration order."""
  return {f.name: _default(f) for f in _fields(cls)}


def config_dict(cls) -> ml_collections.ConfigDict:
  """The config group of `cls`'s defaults (nested dicts as nested groups)."""
  group = ml_collections.ConfigDict()
  for name, value in defaults(cls).items():
    group[name] = ml_collections.ConfigDict(value) if isinstance(value, dict) else value
  return group


def _plain(value):
  """A config value as plain Python: nested groups as dicts, lists as tuples."""
  if isinstance(value, ml_collections.ConfigDict):
    value = value.to_dict()
  if isinstance(value, dict):
    return {k: _plain(v) for k, v in value.items()}
  if isinstance(value, list):
    return tuple(_plain(v) for v in value)
  return value


class SettingsError(ValueError):
  """An unknown or refused field; `field` is dotted from the root ('ppo.epochs')."""

  def __init__(self, field: str, why: str):
    super().__init__(f'config field {field}: {why}')
    self.field = field
    self.why = why


def first_problem(settings) -> Optional[Problem]:
  """(field, why) of the first field its check refuses, then of `problem()`; None when all pass."""
  for field in _fields(type(settings)):
    check = field.metadata.get('check')
    why = check(getattr(settings, field.name)) if check is not None else None
    if why is not None:
      return field.name, why
  across = getattr(settings, 'problem', None)
  return across() if callable(across) else None


def read(cls, group, prefix: str = '', check: bool = True):
  """The settings `group` holds, checked.

  Args:
    group: a config group or mapping; a missing field (an older config.json) takes its default.
    prefix: the group's dotted path, for errors ('' for top-level fields).
    check: False skips the value checks (unknown fields still raise).

  Returns:
    A frozen `cls` of plain Python values (nested groups as dicts, lists as tuples).

  Raises:
    SettingsError: the first unknown field, or value its check refuses.
  """
  names = [f.name for f in _fields(cls)]
  given = dict(group.items()) if group is not None else {}
  dotted = (lambda name: f'{prefix}.{name}') if prefix else (lambda name: name)
  unknown = [k for k in given if k not in names]
  if unknown:
    raise SettingsError(dotted(unknown[0]), f'unknown field; allowed: {", ".join(names)}')
  settings = cls(**{k: _plain(v) for k, v in given.items()})
  problem = first_problem(settings) if check else None
  if problem is not None:
    raise SettingsError(dotted(problem[0]), problem[1])
  return settings


def reference(cls, prefix: str) -> Iterator[Tuple[str, str, str, str]]:
  """(dotted name, type, default, help) of each field, for docs/settings.md;
  a frozen field's help says so."""
  hints = getattr(cls, '__annotations__', {})
  for field in _fields(cls):
    kind = hints.get(field.name, field.type)
    kind = kind if isinstance(kind, str) else kind.__name__ if isinstance(kind, type) else str(kind)
    kind = kind.replace('typing.', '')
    frozen = ' (fixed for the run: a resume must keep it)' if field.metadata.get('frozen') else ''
    yield (f'{prefix}.{field.name}' if prefix else field.name, kind,
           repr(_default(field)), field.metadata.get('help', '') + frozen)


def _is_number(value) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def boolean(value) -> Optional[str]:
  """True or False (not 0 or 1)."""
  return None if isinstance(value, bool) else f'must be True or False, got {value!r}'


def integer(least: int = 1) -> Check:
  """An int (not a bool) of at least `least`."""
  def check(value):
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
      return f'must be an integer >= {least}, got {value!r}'
    return None
  return check


def positive(value) -> Optional[str]:
  return None if _is_number(value) and value > 0 else f'must be a positive number, got {value!r}'


def at_least(least: float, note: str = '') -> Check:
  """A number >= `least`; `note` follows the bound in the error ('(0 = off)')."""
  def check(value):
    if _is_number(value) and value >= least:
      return None
    return f'must be a number >= {least:g}{note}, got {value!r}'
  return check


def within(low: float, high: float, low_closed: bool = True, high_closed: bool = True) -> Check:
  """A number in the interval from `low` to `high`, each end closed or open."""
  text = f'{"[" if low_closed else "("}{low:g}, {high:g}{"]" if high_closed else ")"}'

  def check(value):
    if (_is_number(value) and (value >= low if low_closed else value > low)
        and (value <= high if high_closed else value < high)):
      return None
    return f'must be in {text}, got {value!r}'
  return check


def one_of(allowed) -> Check:
  """One of `allowed` (a sequence, or a function returning one at start-up)."""
  def check(value):
    choices = allowed() if callable(allowed) else allowed
    if value in choices:
      return None
    return f'{value!r} is not allowed; choose one of {", ".join(map(str, choices))}'
  return check


def text(value) -> Optional[str]:
  return None if isinstance(value, str) else f'must be a string, got {value!r}'


def texts(value) -> Optional[str]:
  if isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value):
    return None
  return f'must be a tuple of strings, got {value!r}'


def finite_numbers(value) -> Optional[str]:
  if isinstance(value, (tuple, list)) and all(_is_number(v) and math.isfinite(v) for v in value):
    return None
  return f'must be finite numbers, got {value!r}'


def mapping(value) -> Optional[str]:
  return None if isinstance(value, dict) else f'must be a group of fields, got {value!r}'


def first(problems: Sequence[Tuple[str, Optional[str]]]) -> Optional[Problem]:
  """The first (field, why) whose why is not None, for a class's `problem()`."""
  return next(((field, why) for field, why in problems if why is not None), None)


def help_table(groups: Sequence[Tuple[str, Type]]) -> List[str]:
  """Markdown rows `| field | type | default | help |` for (prefix, class) pairs."""
  rows = ['| field | type | default | what it does |', '|---|---|---|---|']
  for prefix, cls in groups:
    for name, kind, default, help_text in reference(cls, prefix):
      cell = help_text.replace('|', '\\|').replace('<', '\\<')
      rows.append(f'| `{name}` | {kind} | `{default}` | {cell} |')
  return rows
