"""A population's edges without Ray running ([28]): Ray Tune's state that
is missing or cut off, the Ray checkpoints a member empties and those a
copy still needs, a member's own hyperparameters in its folder (and
launch/train.py finishing it with them), and the summary of stopped
members or of a population Ray ended early."""

import json
import os
import pickle
import subprocess
import sys
from types import SimpleNamespace

from configs import cartpole, pbt as pbt_lib
from configs.validation import validate
from rundir import population_record as record
from rundir import ray_state

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _experiment(path, trials, cut=False):
  path.mkdir(parents=True)
  (path / 'tuner.pkl').write_bytes(pickle.dumps({'tuner': 1}))
  (path / 'searcher-state-x.pkl').write_bytes(b'' if cut else pickle.dumps([1, 2]))
  (path / 'experiment_state-2026-12-04_04-00-00.json').write_text(
      json.dumps({'trial_data': [[{}, {}]] * trials}))


def test_ray_state_that_cannot_restore_every_member_is_named(tmp_path):
  """Before: a cut-off state restored one trial, and a new experiment ran
  over the old member folders with a freshly drawn learning rate."""
  assert ray_state.unusable(str(tmp_path / 'none'), 2) == 'it is missing'
  _experiment(tmp_path / 'ok', 2)
  assert ray_state.unusable(str(tmp_path / 'ok'), 2) is None
  assert ray_state.unusable(str(tmp_path / 'ok'), 3) == 'it holds 2 of the 3 members'
  _experiment(tmp_path / 'cut', 2, cut=True)   # a full disk: Ray's EOFError: Ran out of input
  assert ray_state.unusable(str(tmp_path / 'cut'), 2) == 'it is cut off (EOFError reading it)'
  _experiment(tmp_path / 'half', 2)
  state = tmp_path / 'half' / 'experiment_state-2026-12-04_04-00-00.json'
  state.write_text(state.read_text()[:10])
  assert ray_state.unusable(str(tmp_path / 'half'), 2).startswith('it is cut off (JSONDecodeError')
  moved = ray_state.set_aside(str(tmp_path / 'half'))
  assert not (tmp_path / 'half').exists() and os.path.basename(moved).startswith('half.lost-')


def _ray_checkpoint(trial, index, step):
  folder = trial / f'checkpoint_{index:06d}'
  (folder / 'state').mkdir(parents=True)
  (folder / 'member.json').write_text(json.dumps({'member': 'member_00000', 'env_steps': step}))


def test_a_member_empties_the_ray_checkpoints_no_copy_needs(tmp_path):
  """Ray keeps every checkpoint folder (a copy may name any); the member
  empties the state of all but its newest two and those a pending copy
  names. Before: Ray deleted all but two, and a resume after a kill -9 at a
  copy failed: 'Could not recover from checkpoint as it does not exist'."""
  # Ray reuses folder names after a resume: the newest are by env step.
  for i, step in enumerate((20000, 8000, 12000, 16000, 4000)):
    _ray_checkpoint(tmp_path, i, step)
  ray_state.prune(str(tmp_path), [8000])
  kept = sorted(p.parent.name for p in tmp_path.glob('checkpoint_*/state'))
  assert kept == ['checkpoint_000000', 'checkpoint_000001', 'checkpoint_000003']
  assert len(list(tmp_path.glob('checkpoint_*/member.json'))) == 5


def test_pending_copies_name_their_donors_steps(tmp_path):
  record.decide(str(tmp_path), {'donor': 'member_00000', 'recipient': 'member_00001',
                                'env_steps': 8000})
  record.decide(str(tmp_path), {'donor': 'member_00002', 'recipient': 'member_00003',
                                'env_steps': 4000})
  (tmp_path / record.PENDING / 'member_00004.json').write_text('{"donor": "member_0')   # cut off
  assert record.pending_steps(str(tmp_path), 'member_00000') == [8000]
  assert record.pending_steps(str(tmp_path), 'member_00001') == []


def test_a_member_folder_keeps_its_hyperparameters_for_train_py(tmp_path):
  """Finishing a member alone with train.py takes its own values, not the
  base config's (before: the base learning rate)."""
  member = tmp_path / 'member_00001'
  member.mkdir()
  assert record.read_values(str(member)) is None
  record.write_values(str(member), 'member_00001', {'learning_rate': 5.6e-5})
  assert record.read_values(str(member)) == {'learning_rate': 5.6e-5}
  out = subprocess.run(
      [sys.executable, 'launch/train.py', '--config=configs/cartpole.py', '--validate_only',
       f'--config.workdir={member}'], cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  assert json.loads(out.stdout)['learning_rate'] == 5.6e-5
  assert (f'{member} is a population member: learning_rate=5.6e-05 from its pbt_member.json'
          in out.stderr)


def _settings(tmp_path):
  c = cartpole.get_config()
  c.pbt.adapt = ('learning_rate',)
  c.workdir = str(tmp_path)
  return pbt_lib.check(c, validate(c))


def test_a_member_stopped_by_sigterm_is_stopped_not_failed(tmp_path):
  error = RuntimeError('ray::Member.train()\n  MemberStopped: member_00001 stopped by SIGTERM at '
                       'env step 12,000 (its checkpoint saved); the same command resumes it')
  results = [SimpleNamespace(path=str(tmp_path / f'Member_9b6e2_0000{i}_{i}_2026-12-04_04-00-00'),
                             metrics={'member': f'member_0000{i}', 'score': 20.0,
                                      'env_steps': 12000}, config={}, error=e)
             for i, e in ((0, None), (1, error))]
  summary = record.summarise(results, str(tmp_path), _settings(tmp_path), 48000)
  assert summary['stopped'] == ['member_00001'] and summary['failed'] == []
  assert summary['finished'] is False
  assert summary['members'][1]['error'] == (
      'member_00001 stopped by SIGTERM at env step 12,000 (its checkpoint saved); the same '
      'command resumes it')


def test_a_population_ray_ended_is_summarised_from_its_members_folders(tmp_path):
  for name, step in (('member_00000', 8000), ('member_00001', 4000)):
    folder = tmp_path / record.MEMBERS / name
    folder.mkdir(parents=True)
    (folder / 'metrics.jsonl').write_text(
        json.dumps({'env_steps': step, 'pbt/score': 1.5}) + '\n')
    record.write_values(str(folder), name, {'learning_rate': 1e-4})
  summary = record.summarise(None, str(tmp_path), _settings(tmp_path), 48000)
  assert [(m['member'], m['env_steps'], m['values']) for m in summary['members']] == [
      ('member_00000', 8000, {'learning_rate': 1e-4}),
      ('member_00001', 4000, {'learning_rate': 1e-4})]
  assert summary['finished'] is False
  assert json.loads((tmp_path / record.SUMMARY).read_text()) == summary
