"""The sweep yamls (launch/sweeps/*.yaml, wandb's format) run on this machine
without an account: grid and random search, one trial after another, each a
normal run folder <folder>/trial_<i> trained by the yaml's program. The
sweep's record, <folder>/sweep.json, holds each trial's values and status, so
the same command resumes a stopped sweep (a trial cut short resumes from its
checkpoint). Bayesian search needs wandb's server: `wandb sweep`."""

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

METHODS = ('grid', 'random')
RECORD = 'sweep.json'
# wandb's distributions that a random search here draws from.
DISTRIBUTIONS = ('uniform', 'log_uniform_values', 'int_uniform')


class SweepError(ValueError):
  """A sweep file, or a sweep folder, this runner cannot use; the message says why."""


def load(path: str) -> Dict[str, Any]:
  """The sweep yaml at `path`, checked: a program, parameters and a metric.

  Raises:
    SweepError: naming the file and what is missing or wrong.
  """
  try:
    with open(path) as f:
      sweep = yaml.safe_load(f)
  except (OSError, yaml.YAMLError) as e:
    raise SweepError(f'cannot read the sweep {path}: {e}') from None
  if not isinstance(sweep, dict):
    raise SweepError(f'{path} is not a sweep (a mapping with program, parameters, metric)')
  for key in ('program', 'parameters', 'metric', 'command'):
    if key not in sweep:
      raise SweepError(f'{path} has no {key!r}')
  metric = sweep['metric']
  if not isinstance(metric, dict) or metric.get('goal') not in ('maximize', 'minimize') \
      or 'name' not in metric:
    raise SweepError(f"{path}: metric needs a name and goal 'maximize' or 'minimize'")
  return sweep


def _parameter_values(name: str, spec: dict) -> Optional[list]:
  """The values a grid takes for one parameter (None: a distribution)."""
  if 'value' in spec:
    return [spec['value']]
  if 'values' in spec:
    return list(spec['values'])
  return None


def _draw(name: str, spec: dict, rng: np.random.Generator):
  """One random value of a parameter: wandb's constant, categorical, uniform,
  log_uniform_values (log-uniform between min and max) or int_uniform."""
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
  """Each trial's parameter values, in order; `fixed` replaces parameters.

  Args:
    method: 'grid' (every combination of the parameters' values) or 'random'
      (`count` draws, reproducible from `seed`).

  Raises:
    SweepError: an unknown method, a grid over a distribution, a random
      search without a count, or a distribution this runner does not draw.
  """
  params = {**sweep['parameters'], **{k: {'value': v} for k, v in (fixed or {}).items()}}
  if method == 'grid':
    grids = {}
    for name, spec in params.items():
      grids[name] = _parameter_values(name, spec)
      if grids[name] is None:
        raise SweepError(f'a grid needs values: parameter {name} is a distribution; use '
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
  """The argv of one trial: the sweep's `command` with ${args} as wandb's
  agent writes them (--name=value), and the trial's run folder."""
  argv = []
  for item in sweep['command']:
    if item == '${args}':
      argv += [f'--{name}={value}' for name, value in params.items()]
    elif item == '${program}':
      argv.append(sweep['program'])
    elif item == '${interpreter}':
      argv.append(python)
    elif item != '${env}':
      argv.append(str(item))
  if argv[:1] != [python]:
    argv.insert(0, python)
  return argv + [f'--config.workdir={workdir}']


def _write(folder: str, record: dict) -> None:
  with atomic_write.atomic_open(os.path.join(folder, RECORD)) as f:
    json.dump(record, f, indent=1)


def prepare(folder: str, sweep_path: str, planned: List[Dict[str, Any]], method: str) -> dict:
  """The sweep's record in `folder`: read to resume when it holds the same
  trials, else written new.

  Raises:
    SweepError: `folder` holds another sweep's record (other trials).
  """
  path = os.path.join(folder, RECORD)
  if os.path.exists(path):
    with open(path) as f:
      record = json.load(f)
    if [t['params'] for t in record['trials']] != json.loads(json.dumps(planned)):
      raise SweepError(f'{folder} holds another sweep ({record["sweep"]}, {record["method"]}, '
                       f'{len(record["trials"])} trials); give another --dir, or the same '
                       'sweep, method, --trials, --seed and --set to resume it')
    return record
  os.makedirs(folder, exist_ok=True)
  record = {'sweep': sweep_path, 'method': method,
            'trials': [{'name': f'trial_{i}', 'params': p, 'status': 'pending'}
                       for i, p in enumerate(planned)]}
  _write(folder, record)
  return record


def run(folder: str, sweep: Dict[str, Any], record: dict, say=print) -> dict:
  """Trains every trial of `record` that has not finished, one after another,
  writing its status ('finished', or 'failed' with the exit status) as it
  ends. A KeyboardInterrupt (the trial stopped cleanly too) leaves the trial
  pending, to resume, and is raised again."""
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
  """Each trial with its last logged value of `metric` (None: none yet)."""
  out = []
  for trial in record['trials']:
    value = None
    try:
      for row in run_folder.read_metrics(os.path.join(folder, trial['name'])):
        if isinstance(row.get(metric), (int, float)):
          value = float(row[metric])
    except (FileNotFoundError, ValueError):
      pass
    out.append({**trial, 'metric': value})
  return out


def table(rows: Sequence[Dict[str, Any]], metric: str, goal: str) -> List[str]:
  """A markdown table of the trials, the best first by `goal`, then those
  without a value."""
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
