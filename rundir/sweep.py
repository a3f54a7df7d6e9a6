"""A sweep yaml (wandb's format) run here without an account: grid or random
search, trial by trial, each a run folder <folder>/trial_<i>; <folder>/sweep.json
holds each trial's values and status, so the same command resumes a stopped
sweep (a cut trial from its checkpoint). Bayesian search needs `wandb sweep`."""

import itertools
import json
import math
import os
import subprocess
import sys
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import yaml

from infra import atomic_write
from rundir import run_folder

RECORD = 'sweep.json'
DISTRIBUTIONS = ('uniform', 'log_uniform_values', 'int_uniform')


class SweepError(ValueError):
  """A sweep file, or a sweep folder, this runner cannot use; the message says why."""


def load(path: str) -> Dict[str, Any]:
  """The sweep yaml at `path`; SweepError naming what is missing or wrong."""
  try:
    with open(path) as f:
      sweep = yaml.safe_load(f)
  except (OSError, yaml.YAMLError) as e:
    raise SweepError(f'cannot read the sweep {path}: {e}') from None
  missing = [k for k in ('program', 'parameters', 'metric', 'command')
             if not isinstance(sweep, dict) or k not in sweep]
  if missing:
    raise SweepError(f'{path} is not a sweep: it has no {", ".join(missing)}')
  metric = sweep['metric']
  if not isinstance(metric, dict) or metric.get('goal') not in ('maximize', 'minimize') \
      or 'name' not in metric:
    raise SweepError(f"{path}: metric needs a name and goal 'maximize' or 'minimize'")
  return sweep


def _parameter_values(name: str, spec: dict) -> Optional[list]:
  """A parameter's values for a grid (None: a distribution)."""
  if 'value' in spec:
    return [spec['value']]
  if 'values' in spec:
    return list(spec['values'])
  return None


def _draw(name: str, spec: dict, rng: np.random.Generator):
  """One draw of a parameter: wandb's value, values, or a DISTRIBUTIONS one."""
  values = _parameter_values(name, spec)
  if values is not None:
    return values[int(rng.integers(len(values)))]
  kind = spec.get('distribution', 'uniform')
  low, high = spec.get('min'), spec.get('max')
  if kind not in DISTRIBUTIONS or low is None or high is None:
    raise SweepError(f'parameter {name}: distribution {kind!r} with min and max is needed; '
                     f'this runner draws {", ".join(DISTRIBUTIONS)}')
  if kind == 'int_uniform':
    return int(rng.integers(int(low), int(high) + 1))
  if kind == 'log_uniform_values':
    return float(math.exp(rng.uniform(math.log(low), math.log(high))))
  return float(rng.uniform(low, high))


def trials(sweep: Dict[str, Any], method: str, count: int = 0, seed: int = 0,
           fixed: Optional[Dict[str, Any]] = None) -> List[Dict[str, Any]]:
  """Each trial's parameter values, `fixed` replacing parameters: 'grid',
  every combination of the values; 'random', `count` draws from `seed`.
  SweepError for another method, a grid over a distribution, no count."""
  params = {**sweep['parameters'], **{k: {'value': v} for k, v in (fixed or {}).items()}}
  if method == 'grid':
    grids = {name: _parameter_values(name, spec) for name, spec in params.items()}
    flat = [name for name, values in grids.items() if values is None]
    if flat:
      raise SweepError(f'a grid needs values: parameter {flat[0]} is a distribution; use '
                       '--method=random')
    return [dict(zip(grids, combo)) for combo in itertools.product(*grids.values())]
  if method == 'random':
    if count < 1:
      raise SweepError('a random search needs --trials >= 1')
    rng = np.random.default_rng(seed)
    return [{name: _draw(name, spec, rng) for name, spec in params.items()}
            for _ in range(count)]
  raise SweepError(f'method {method!r}: this runner does grid and random search; give '
                   '--method=random or grid (bayes needs wandb\'s server: `wandb sweep`)')


def command(sweep: Dict[str, Any], params: Dict[str, Any], workdir: str,
            python: str = sys.executable) -> List[str]:
  """A trial's argv: `python`, `agent_args` and its run folder."""
  return [python, *agent_args(sweep, params), f'--config.workdir={workdir}']


def agent_args(sweep: Dict[str, Any], params: Dict[str, Any]) -> List[str]:
  """The sweep's `command` after the interpreter, as wandb's agent writes it."""
  argv = []
  for item in sweep['command']:
    if item == '${args}':
      argv += [f'--{name}={value}' for name, value in params.items()]
    elif item == '${program}':
      argv.append(sweep['program'])
    elif item not in ('${env}', '${interpreter}'):
      argv.append(str(item))
  return argv


def _write(folder: str, record: dict) -> None:
  with atomic_write.atomic_open(os.path.join(folder, RECORD)) as f:
    json.dump(record, f, indent=1)


def prepare(folder: str, sweep_path: str, planned: List[Dict[str, Any]], method: str) -> dict:
  """The sweep's record in `folder`, read to resume when it holds the same
  trials, else new; SweepError when it holds other trials."""
  path = os.path.join(folder, RECORD)
  if os.path.exists(path):
    try:
      with open(path) as f:
        record = json.load(f)
      trials_saved = [t['params'] for t in record['trials']]
    except (ValueError, KeyError, TypeError) as e:
      raise SweepError(f'{path} is not a sweep record ({type(e).__name__}: {e})') from None
    if trials_saved != json.loads(json.dumps(planned)):
      raise SweepError(f'{folder} holds another sweep ({record["sweep"]}, {record["method"]}); '
                       'give another --dir, or its sweep, method, --trials, --seed and --set')
    return record
  os.makedirs(folder, exist_ok=True)
  record = {'sweep': sweep_path, 'method': method,
            'trials': [{'name': f'trial_{i}', 'params': p, 'status': 'pending'}
                       for i, p in enumerate(planned)]}
  _write(folder, record)
  return record


def run(folder: str, sweep: Dict[str, Any], record: dict, say=print) -> dict:
  """Trains each unfinished trial in turn, recording 'finished' or 'failed' (with the exit status);
  a KeyboardInterrupt (the trial stops cleanly too) leaves the trial pending and is raised again."""
  for trial in record['trials']:
    if trial['status'] == 'finished':
      continue
    workdir = os.path.join(folder, trial['name'])
    argv = command(sweep, trial['params'], workdir)
    say(f'{trial["name"]}: {" ".join(argv[1:])}')
    process = subprocess.Popen(argv)
    try:
      code = process.wait()
    except KeyboardInterrupt:
      process.wait()   # the trial got the signal too: it saves and stops
      raise
    trial['status'] = 'finished' if code == 0 else 'failed'
    trial['exit_status'] = code
    _write(folder, record)
  return record


def results(folder: str, record: dict, metric: str) -> List[Dict[str, Any]]:
  """Each trial with its last logged `metric` (None: none yet)."""
  out = []
  for trial in record['trials']:
    try:
      rows = run_folder.read_metrics(os.path.join(folder, trial['name']))
    except (FileNotFoundError, ValueError):
      rows = []
    values = [float(r[metric]) for r in rows if isinstance(r.get(metric), (int, float))]
    out.append({**trial, 'metric': values[-1] if values else None})
  return out


def table(rows: Sequence[Dict[str, Any]], metric: str, goal: str) -> List[str]:
  """A markdown table of the trials, the best by `goal` first."""
  sign = -1.0 if goal == 'maximize' else 1.0
  ordered = sorted(rows, key=lambda r: (r['metric'] is None, sign * (r['metric'] or 0.0)))
  names = sorted({k for r in rows for k in r['params']})
  lines = [f'| trial | status | {metric} | ' + ' | '.join(names) + ' |',
           '| --- ' * (3 + len(names)) + '|']
  for r in ordered:
    value = '-' if r['metric'] is None else f'{r["metric"]:.4g}'
    cells = [f'{r["params"].get(n, "")}' for n in names]
    lines.append(f'| {r["name"]} | {r["status"]} | {value} | ' + ' | '.join(cells) + ' |')
  return lines
