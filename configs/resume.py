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
FROZEN = ('network', 'tasks', 'atari', 'popart.enabled', 'popart.start', 'optimizer.name',
          'optimizer.momentum', 'optimizer.clip_by')
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


def schedule_note(allowed, update: int, schedule, env_steps_per_update: int) -> str:
  """On a resume that changed total_env_steps: the line saying where the
  learning rate goes ('' otherwise). The rate anneals linearly to 0 over
  the run's total, so a new total moves it at the same learner update. The
  run follows the new total (a finished run's old schedule is at 0, and
  training on needs a rate), and says so: the rate before and after."""
  changed = {field: (old, new) for field, old, new in allowed}
  if 'total_env_steps' not in changed:
    return ''
  old_total, new_total = changed['total_env_steps']
  old_rate = float(changed.get('learning_rate', (schedule(0),))[0])
  # Env steps per update as saved (batch_size and unroll_length may change too).
  per_update = env_steps_per_update
  for field in ('batch_size', 'unroll_length'):
    if field in changed and changed[field][1]:
      per_update = per_update * int(changed[field][0]) // int(changed[field][1])
  old_updates = max(1, -(-int(old_total) // max(per_update, 1)))
  before = old_rate * max(0.0, 1.0 - update / old_updates)
  return (f'total_env_steps: saved {old_total:,}, now {new_total:,}; the learning rate anneals '
          f'linearly to 0 over the new total: at learner update {update:,}, where this run '
          f'resumes, it is {float(schedule(update)):.3g} (the saved total had {before:.3g})')
