"""Every sweep's parameters become command lines that the config accepts."""

import glob
import os
import shlex

import json
import subprocess
import sys

import pytest
import yaml

from rundir import sweep as sweep_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SWEEPS = sorted(glob.glob(os.path.join(ROOT, 'launch', 'sweeps', '*.yaml')))


def _candidates(spec):
  """A few values the sweep could pick for one parameter."""
  if 'value' in spec:
    return [spec['value']]
  if 'values' in spec:
    return list(spec['values'])
  return [spec["min"], spec["max"]]


def _parse(argv):
  """The config that launch/train.py builds from argv (via --validate_only)."""
  proc = subprocess.run([sys.executable, *argv, '--validate_only'], cwd=ROOT,
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  return json.loads(proc.stdout)


def test_there_are_sweeps_for_the_main_configs():
  names = {os.path.basename(p) for p in SWEEPS}
  assert {'nethack_popart.yaml', 'atari_popart.yaml'} <= names


@pytest.mark.parametrize('path', SWEEPS, ids=os.path.basename)
def test_sweep_command_lines_parse_and_validate(path):
  with open(path) as f:
    sweep = yaml.safe_load(f)
  assert sweep['program'] == 'launch/train.py'
  params = sweep['parameters']
  assert all(name.startswith('config.') for name in params)
  # The lower and the upper corner of the search space.
  for corner in (0, -1):
    values = {name: _candidates(spec)[corner] for name, spec in params.items()}
    argv = sweep_lib.agent_args(sweep, values)
    config = _parse(argv)  # parsed and validated by train.py itself
    for name, value in values.items():
      leaf = config
      for part in name.split('.')[1:]:
        leaf = leaf[part]
      assert leaf == pytest.approx(value), shlex.join(argv)
