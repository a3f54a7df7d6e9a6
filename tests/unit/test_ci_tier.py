"""The CI tier is the README's test command: .ci/run's last line is the
command the README's quick start gives after its install, both leave out the
tests marked slow on both lines, and only the system and learning tiers hold
slow tests (the unit tier is the fast line, whole); the fast line alone
compiles without LLVM's optimisation."""

import os
import re
import subprocess
import sys

from tests.support import tiers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(*parts):
  with open(os.path.join(ROOT, *parts)) as f:
    return f.read()


def test_ci_runs_the_readmes_test_command_without_the_slow_tests():
  ci_line = [l for l in _read('.ci', 'run').splitlines() if l.strip()][-1].strip()
  blocks = re.findall(r'```bash\n(.*?)```', _read('README.md'), re.S)
  quick_start_tests = [b.strip() for b in blocks if 'pytest' in b][0]
  assert quick_start_tests.endswith('pip install -r requirements.txt -e . && ' + ci_line)
  lines = ci_line.split(' && ')
  assert len(lines) == 2
  assert lines[0] == 'python -m pytest -q -n auto -m "not slow" tests/unit tests/system'
  assert lines[1] == 'python -m pytest -q -m "not slow" tests/learning'
  assert re.search(r'^\s+slow: ', _read('pytest.ini'), re.M)


def test_only_the_system_and_learning_tiers_hold_slow_tests():
  out = subprocess.run([sys.executable, '-m', 'pytest', '-q', '--collect-only', '-m', 'slow', 'tests'],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
  ids = [l for l in out.stdout.splitlines() if '::' in l]
  assert ids, out.stdout[-2000:] + out.stderr[-2000:]
  assert all(i.startswith(('tests/system/', 'tests/learning/')) for i in ids), ids


def test_a_session_of_unit_tests_alone_compiles_without_llvms_optimisation(request):
  """tests/conftest.py's rule: the fast line compiles at level 0; a session with another tier (the
  CI tier's unit-and-system session, the learning tier) keeps XLA's optimisation."""
  flag_on = tiers.UNIT_ONLY_XLA_FLAG in os.environ['XLA_FLAGS']
  assert flag_on == tiers.unit_only(request.config)
