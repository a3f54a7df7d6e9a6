"""A saved config against a resume's: `compare` sets apart the frozen fields
(network, tasks, shapes: the run stops before writing anything); every other
may change (docs/run_folder.md). `migrate` reads an older config.json as today's."""

import json
from typing import Any, Dict, List, Mapping, Optional, Tuple

import ml_collections

from configs import common
from infra import settings

# Settings that moved since runs were saved: (group, field) -> (group, field).
MOVED = {('actors', 'envpool_threads'): ('envpool', 'threads'),
         ('actors', 'nle_workers'): ('nle', 'workers'), ('actors', 'nle_ttyrecs'): ('nle', 'ttyrecs')}


def migrate(saved: dict) -> dict:
  """A saved config.json, in place, with the MOVED fields under today's names."""
  for (group, name), (new_group, new_name) in MOVED.items():
    if isinstance(saved.get(group), dict) and name in saved[group]:
      saved.setdefault(new_group, {}).setdefault(new_name, saved[group].pop(name))
  return saved


def flatten(tree: Any, prefix: str = '') -> Dict[str, Any]:
  """Nested dicts flattened to {'a.b': leaf} (lists are leaves)."""
  if not isinstance(tree, dict):
    return {prefix: tree}
  out = {}
  for key, value in tree.items():
    out.update(flatten(value, f'{prefix}.{key}' if prefix else key))
  return out


def is_frozen(field: str) -> bool:
  """Whether a dotted config field's setting is frozen (infra/settings.frozen_setting);
  a field inside a group's dict ('network.torso_kwargs.x') is its setting's."""
  parts = field.split('.')
  groups = dict(common.groups())
  if parts[0] in groups and len(parts) > 1:
    return settings.is_frozen(groups[parts[0]], parts[1])
  return settings.is_frozen(common.RunConfig, parts[0])


def _differences(saved: Dict[str, Any], new: Dict[str, Any]) -> List[Tuple[str, Any, Any]]:
  # A field the saved config lacks was added to the configs after the run
  # started (run_loading gives it its default): not a change.
  missing = object()
  out = []
  for field in sorted(saved):
    old_value, new_value = saved[field], new.get(field, missing)
    if old_value != new_value:
      out.append((field, old_value, None if new_value is missing else new_value))
  return out


def as_source(config) -> Dict[str, Any]:
  """A config as config.json holds it (JSON makes tuples lists): a RunSpec's `source`."""
  return json.loads(config.to_json_best_effort(sort_keys=True))


def _tuples(value):
  """JSON lists back to the tuples the config files use (ConfigDict keeps them)."""
  if isinstance(value, list):
    return tuple(_tuples(v) for v in value)
  if isinstance(value, dict):
    return {k: _tuples(v) for k, v in value.items()}
  return value


def from_source(source: Mapping[str, Any]) -> ml_collections.ConfigDict:
  """A config from what config.json holds (`as_source`), JSON lists as tuples again."""
  return ml_collections.ConfigDict(_tuples(dict(source)))


def compare(saved: Dict[str, Any], source: Dict[str, Any]) -> Tuple[List[Tuple], List[Tuple]]:
  """The fields a resume changes, as (frozen, allowed) lists of (dotted field,
  saved value, new value), in field order.

  `workdir` is not compared. A field the saved config lacks is no change;
  one the new config lacks is, new value None.

  Args:
    saved: the saved config, as config.json holds it.
    source: the new config, as a RunSpec's source holds it.
  """
  diffs = _differences(flatten(saved), flatten(source))
  diffs = [d for d in diffs if d[0] != 'workdir']
  return [d for d in diffs if is_frozen(d[0])], [d for d in diffs if not is_frozen(d[0])]


def _kind(value: Any) -> str:
  if isinstance(value, bool):
    return 'true or false'
  if isinstance(value, (int, float)):
    return 'a number'
  if isinstance(value, str):
    return 'a string'
  if isinstance(value, list):
    return 'a list'
  return type(value).__name__


def mistyped(diffs: List[Tuple]) -> List[Tuple]:
  """(field, saved value, expected kind) per difference whose saved value's kind is not the new
  one's (a hand-edited config.json); an absent value or an int against a float is no mismatch."""
  return [(field, old, _kind(new)) for field, old, new in diffs
          if old is not None and new is not None and _kind(old) != _kind(new)]


def _short(value: Any, limit: int = 120) -> str:
  text = json.dumps(value) if value is not None else '(absent)'
  return text if len(text) <= limit else text[:limit - 3] + '...'


def describe(diffs: List[Tuple]) -> str:
  """Differences on one line: 'a.b: saved X, now Y; ...', values as JSON cut to 120 characters."""
  return '; '.join(f'{field}: saved {_short(old)}, now {_short(new)}' for field, old, new in diffs)


def schedule_note(allowed, update: int, schedule, env_steps_per_update: int,
                  anneal_to: float = 0.0, learning_rate: Optional[float] = None) -> str:
  """The line saying how a new total_env_steps moves the learning rate; '' if it did not change.

  The rate anneals over the run's total, so the run follows the new total (a finished run's old one
  is at 0); the line gives the rate at the resumed update under the new total and the saved one.

  Args:
    allowed: the allowed changes, as `compare` gives them (saved values of
      the rate, anneal_to, batch_size and unroll_length are read there).
    update: the learner update the run resumes at.
    schedule: the new learning-rate schedule (learner update -> rate).
    env_steps_per_update: in the new config.
    learning_rate: the new base rate; None: the schedule's rate at update 0.
  """
  changed = {field: (old, new) for field, old, new in allowed}
  if 'total_env_steps' not in changed:
    return ''
  old_total, new_total = changed['total_env_steps']
  base = schedule(0) if learning_rate is None else learning_rate
  old_rate = float(changed.get('learning_rate', (base,))[0])
  # Env steps per update as saved (batch_size and unroll_length may change too).
  per_update = env_steps_per_update
  for field in ('batch_size', 'unroll_length'):
    if field in changed and changed[field][1]:
      per_update = per_update * int(changed[field][0]) // int(changed[field][1])
  old_updates = max(1, -(-int(old_total) // max(per_update, 1)))
  old_end = float(changed.get('optimizer.anneal_to', (anneal_to,))[0] or 0.0)
  before = old_rate * (1.0 - (1.0 - old_end) * min(1.0, update / old_updates))
  target = '0' if anneal_to == 0 else f'{anneal_to:g} x its base'
  return (f'total_env_steps: saved {old_total:,}, now {new_total:,}; the learning rate anneals '
          f'linearly to {target} over the new total: at learner update {update:,}, where this run '
          f'resumes, it is {float(schedule(update)):.3g} (the saved total had {before:.3g})')
