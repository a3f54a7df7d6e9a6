"""What may change when a run resumes: the saved config against the new one.

A run folder's `config.json` is the config its checkpoints were trained
with. Resuming with a config whose network, tasks or parameter shapes differ
cannot restore them (or would restore them into a different agent), so
`frozen_changes` lists those differences and the run stops before it writes
anything. Every other field may change on resume (docs/run_folder.md lists them):
`allowed_changes` says which did, for the run's log.
"""

import json
from typing import Any, Dict, List, Tuple

# Prefixes of dotted config fields fixed for a run's life: the network, the
# tasks and their envs (observations and actions), the value outputs and the
# optimiser state's structure.
FROZEN = ('network', 'tasks', 'atari', 'popart.enabled', 'optimizer.name', 'optimizer.momentum')
# Fields under FROZEN that may change all the same: how the network computes,
# not what (the same parameters, the same function): a run trained on a CPU
# resumes on a GPU.
FREE = ('network.kernels', 'network.dtype')


def flatten(tree: Any, prefix: str = '') -> Dict[str, Any]:
  """{'a.b': value} for every leaf of nested dicts (lists stay leaves)."""
  if not isinstance(tree, dict):
    return {prefix: tree}
  out = {}
  for key, value in tree.items():
    out.update(flatten(value, f'{prefix}.{key}' if prefix else key))
  return out


def is_frozen(field: str) -> bool:
  return field not in FREE and any(field == p or field.startswith(p + '.') for p in FROZEN)


def _differences(saved: Dict[str, Any], new: Dict[str, Any]) -> List[Tuple[str, Any, Any]]:
  # A field the saved config lacks was added to the configs after the run
  # started (run_loading gives it the value that keeps old runs' behaviour):
  # not a change.
  missing = object()
  out = []
  for field in sorted(saved):
    old_value, new_value = saved[field], new.get(field, missing)
    if old_value != new_value:
      out.append((field, old_value, None if new_value is missing else new_value))
  return out


def _as_dict(config) -> Dict[str, Any]:
  # The JSON round trip makes tuples lists, as config.json holds them.
  return json.loads(config.to_json_best_effort(sort_keys=True))


def compare(saved: Dict[str, Any], config) -> Tuple[List[Tuple], List[Tuple]]:
  """(frozen, allowed): (field, saved value, new value) for every field that
  differs between the saved config dict and `config`, split by whether it
  may change on resume. `workdir` is not compared."""
  diffs = _differences(flatten(saved), flatten(_as_dict(config)))
  diffs = [d for d in diffs if d[0] != 'workdir']
  return [d for d in diffs if is_frozen(d[0])], [d for d in diffs if not is_frozen(d[0])]


def _short(value: Any, limit: int = 120) -> str:
  text = json.dumps(value) if value is not None else '(absent)'
  return text if len(text) <= limit else text[:limit - 3] + '...'


def describe(diffs: List[Tuple]) -> str:
  """'a.b: saved X, now Y; c: ...' on one line."""
  return '; '.join(f'{field}: saved {_short(old)}, now {_short(new)}' for field, old, new in diffs)
