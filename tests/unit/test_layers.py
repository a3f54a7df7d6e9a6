"""The package layers point only down (docs/architecture.md): launch/ holds
thin scripts that nothing imports, and each library folder imports only the
folders below it. Read from the source with `ast`, nothing imported."""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Each folder and the folders it may import (besides itself).
ALLOWED = {
    'infra': set(),
    'rl': {'infra'},
    'envs': {'infra'},
    'networks': {'rl', 'infra'},
    'configs': {'rl', 'envs', 'infra', 'networks'},
    'agents': {'rl', 'envs', 'infra', 'networks', 'configs'},
    'rundir': {'rl', 'envs', 'infra', 'networks', 'configs', 'agents'},
    'analysis': {'rl', 'envs', 'infra', 'networks', 'configs', 'agents', 'rundir'},
    'launch': {'rl', 'envs', 'infra', 'networks', 'configs', 'agents', 'rundir', 'analysis'},
}


def _python_files(*folders):
  for folder in folders:
    for base, dirs, files in os.walk(os.path.join(ROOT, folder)):
      dirs[:] = [d for d in dirs if not d.startswith('.')]
      for name in files:
        if name.endswith('.py'):
          yield os.path.join(base, name)


def _imported_packages(path):
  """The top-level names `path` imports, anywhere in the file (inside
  functions too)."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield alias.name.split('.')[0]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      yield node.module.split('.')[0]


def test_library_folders_import_only_the_layers_below():
  wrong = []
  for folder, allowed in ALLOWED.items():
    for path in _python_files(folder):
      for package in _imported_packages(path):
        if package in ALLOWED and package != folder and package not in allowed:
          wrong.append(f'{os.path.relpath(path, ROOT)} imports {package}')
  assert not wrong, wrong


def test_nothing_imports_the_scripts_in_launch():
  folders = [f for f in ALLOWED if f != 'launch'] + ['tests', 'notebooks']
  wrong = [os.path.relpath(path, ROOT) for path in _python_files(*folders)
           if 'launch' in set(_imported_packages(path))]
  for base, _, files in os.walk(os.path.join(ROOT, 'notebooks')):
    for name in files:
      if name.endswith('.ipynb'):
        with open(os.path.join(base, name)) as f:
          text = f.read()
        if 'from launch' in text or 'import launch' in text:
          wrong.append(os.path.relpath(os.path.join(base, name), ROOT))
  for path in _python_files('launch'):
    if 'launch' in set(_imported_packages(path)):
      wrong.append(os.path.relpath(path, ROOT))
  assert not wrong, wrong


def test_the_training_core_reads_typed_settings_not_the_config():
  """agents/, rl/ and networks/ receive the run spec and its typed settings
  (configs/spec.py): none of them imports ml_collections, and no function
  there takes a parameter named `config` (the raw ml_collections config)."""
  wrong = []
  for path in _python_files('agents', 'rl', 'networks'):
    rel = os.path.relpath(path, ROOT)
    if 'ml_collections' in set(_imported_packages(path)):
      wrong.append(f'{rel} imports ml_collections')
    with open(path) as f:
      tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        names = [a.arg for a in node.args.args + node.args.kwonlyargs]
        if 'config' in names:
          wrong.append(f'{rel}: {node.name} takes a config')
  assert not wrong, wrong
