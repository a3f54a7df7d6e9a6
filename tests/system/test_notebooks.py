"""Both notebooks run end to end against a tiny run made here."""

import os

import nbformat
from nbclient import NotebookClient
import pytest

# One pytest-xdist worker: the tiny run is made once (module fixture).
pytestmark = pytest.mark.xdist_group('notebooks')

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope='module')
def tiny_run(tmp_path_factory):
  from configs import atari_popart
  from tests.support.training_runs import train
  config = atari_popart.get_config('games=Pong+Breakout,smoke')
  config.workdir = str(tmp_path_factory.mktemp('nb') / 'run')
  config.total_env_steps *= 2
  train(config)
  return config.workdir


@pytest.mark.parametrize('name', ['analysis.ipynb', 'inspect_agent.ipynb'])
def test_notebook_runs(name, tiny_run, monkeypatch):
  monkeypatch.setenv('ANALYSIS_RUNS', tiny_run)
  monkeypatch.setenv('INSPECT_RUN', tiny_run)
  monkeypatch.setenv('INSPECT_MAX_STEPS', '30')
  monkeypatch.setenv('INSPECT_SALIENCY_FRAMES', '2')
  monkeypatch.setenv('MPLBACKEND', 'Agg')
  monkeypatch.delenv('XLA_FLAGS', raising=False)  # one CPU device, as in Colab
  nb = nbformat.read(os.path.join(ROOT, 'notebooks', name), as_version=4)
  NotebookClient(nb, timeout=600, kernel_name='python3',
                 resources={'metadata': {'path': os.path.join(ROOT, 'notebooks')}}).execute()
  errors = [o for c in nb.cells if c.cell_type == 'code' for o in c.get('outputs', [])
            if o.get('output_type') == 'error']
  assert not errors
