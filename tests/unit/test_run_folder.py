"""A run folder nothing can spoil, piece by piece (fast): the resume
comparison, the one-writer lock, workdir checks, metrics set aside past a
checkpoint, non-finite config numbers, checkpoint verification and damage.
The same guarantees as faults injected into real runs: test_run_faults.py."""

import dataclasses
import json
import os

import jax
import numpy as np
import pytest

from agents import checkpoint
from agents.checkpoint import Checkpointer
from agents.learner import LearnerState
from configs import cartpole, resume
from configs.validation import ConfigError, validate
from infra import settings as settings_lib
from tests.support.faults import largest_data_file
from rundir import run_folder
from rundir.run_folder import RunFolderError, RunLock


def _records(path):
  with open(path) as f:
    return [json.loads(line) for line in f]


# ---------------------------------------------------------------- the pieces

def test_resume_compare_splits_frozen_from_allowed_fields():
  saved = json.loads(cartpole.get_config().to_json_best_effort())
  config = cartpole.get_config()
  config.learning_rate = 1e-4
  config.total_env_steps = 10
  config.network.lstm_size = 64
  config.workdir = 'elsewhere'  # never compared
  frozen, allowed = resume.compare(saved, resume.as_source(config))
  assert frozen == [('network.lstm_size', 0, 64)]
  assert [f for f, _, _ in allowed] == ['learning_rate', 'total_env_steps']
  assert resume.describe(frozen) == 'network.lstm_size: saved 0, now 64'
  for field in ('tasks', 'network.name', 'network.torso_kwargs.answer_sizes',
                'atari.action_set', 'popart.enabled', 'optimizer.name', 'value.bins'):
    assert resume.is_frozen(field)
  for field in ('learning_rate', 'total_env_steps', 'log.every_seconds', 'wandb.mode',
                'entropy_cost', 'checkpoint_every_steps', 'actors.num_actors', 'popart.beta',
                'network.kernels', 'network.dtype', 'envpool.threads', 'nle.workers',
                'no_such_group.field', 'no_such_field'):
    assert not resume.is_frozen(field)


def test_frozen_is_a_settings_own_metadata_and_the_settings_page_says_so():
  """A plug-in's group is frozen where its settings say (no list to keep in step)."""
  @dataclasses.dataclass(frozen=True)
  class Toy:
    shape: int = settings_lib.frozen_setting(3, 'a shape')
    rate: float = settings_lib.setting(0.1, 'a rate')
  assert settings_lib.is_frozen(Toy, 'shape') and not settings_lib.is_frozen(Toy, 'rate')
  rows = dict((name, help_text) for name, _, _, help_text in settings_lib.reference(Toy, 'toy'))
  assert rows == {'toy.shape': 'a shape (fixed for the run: a resume must keep it)',
                  'toy.rate': 'a rate'}


def test_schedule_note_gives_the_rate_under_both_totals_with_anneal_to():
  """A run saved with total 1,000 env steps (10 per update: 100 updates),
  base 0.1, anneal_to 0.5, resumed at update 40 with total 2,000: the saved
  schedule had 0.1 (1 - 0.5 x 40 / 100) = 0.08; the new one (200 updates)
  0.1 (1 - 0.5 x 40 / 200) = 0.09. Saved with anneal_to 0 (changed now to
  0.5): the saved schedule had 0.1 (1 - 40 / 100) = 0.06."""
  new = lambda update: 0.1 * (1 - 0.5 * min(1.0, update / 200))
  allowed = [('total_env_steps', 1000, 2000)]
  assert resume.schedule_note(allowed, 40, new, 10, anneal_to=0.5) == (
      'total_env_steps: saved 1,000, now 2,000; the learning rate anneals linearly to 0.5 x its '
      'base over the new total: at learner update 40, where this run resumes, it is 0.09 (the '
      'saved total had 0.08)')
  note = resume.schedule_note(allowed + [('optimizer.anneal_to', 0.0, 0.5)], 40, new, 10,
                              anneal_to=0.5)
  assert note.endswith('it is 0.09 (the saved total had 0.06)')
  old = lambda update: 0.1 * (1 - update / 200)
  assert resume.schedule_note(allowed, 40, old, 10).endswith(
      'anneals linearly to 0 over the new total: at learner update 40, where this run resumes, '
      'it is 0.08 (the saved total had 0.06)')
  assert resume.schedule_note([('learning_rate', 0.1, 0.2)], 40, new, 10) == ''
  # With a warmup the schedule's rate at update 0 is not the base: the base is passed.
  warm = lambda update: new(update) * min(1.0, (update + 1) / 200)
  assert resume.schedule_note(allowed, 40, warm, 10, anneal_to=0.5, learning_rate=0.1).endswith(
      '(the saved total had 0.08)')


def test_a_second_lock_names_the_holder_and_a_dead_holders_lock_is_taken_over(tmp_path):
  first = RunLock(str(tmp_path)).acquire()
  held = json.loads((tmp_path / run_folder.LOCK_FILE).read_text())
  assert held['pid'] == os.getpid()
  with pytest.raises(RunFolderError, match=f'in use by another trainer .*pid {os.getpid()}'):
    RunLock(str(tmp_path)).acquire()  # another open file: flock refuses it
  first.release()
  assert not (tmp_path / run_folder.LOCK_FILE).exists()
  # What kill -9 leaves: the file with its holder, no flock on it.
  (tmp_path / run_folder.LOCK_FILE).write_text('{"host": "h", "pid": 999999, "started": "then"}')
  lock = RunLock(str(tmp_path)).acquire()
  assert lock.stale_holder == {'host': 'h', 'pid': 999999, 'started': 'then'}
  assert 'pid 999999' in run_folder.describe_stale(lock.stale_holder)
  lock.release()


def test_an_unusable_workdir_is_one_error(tmp_path):
  a_file = tmp_path / 'a_file'
  a_file.write_text('x')
  with pytest.raises(RunFolderError, match='is a file, not a folder'):
    run_folder.check_usable(str(a_file))
  with pytest.raises(RunFolderError, match='cannot create workdir .*Not a directory'):
    run_folder.check_usable(str(a_file / 'run'))
  run_folder.check_usable(str(tmp_path / 'new' / 'run'))
  assert (tmp_path / 'new' / 'run').is_dir()


def test_a_dangling_or_looping_symlink_workdir_is_one_error(tmp_path):
  # Before: 'cannot create workdir ...: File exists' for both.
  dangling = tmp_path / 'dangling'
  dangling.symlink_to(tmp_path / 'gone')
  with pytest.raises(RunFolderError) as e:
    run_folder.check_usable(str(dangling))
  assert str(e.value) == (f'workdir {dangling} is a symbolic link to {tmp_path / "gone"}, which '
                          'does not exist or loops back on itself; fix the link or choose '
                          'another --config.workdir')
  loop = tmp_path / 'loop'
  loop.symlink_to(loop)
  with pytest.raises(RunFolderError, match='loops back on itself'):
    run_folder.check_usable(str(loop))
  target = tmp_path / 'target'
  target.mkdir()
  (tmp_path / 'good').symlink_to(target)
  run_folder.check_usable(str(tmp_path / 'good'))   # a link to a folder is a folder


def test_metrics_past_the_checkpoint_move_to_a_side_file(tmp_path):
  rows = [{'env_steps': s, 'x': i} for i, s in enumerate((10, 20, 30, 40))]
  text = ''.join(json.dumps(r) + '\n' for r in rows) + '{"env_steps": 5'  # cut by kill -9
  (tmp_path / 'metrics.jsonl').write_text(text)
  moved, side = run_folder.set_aside_metrics(str(tmp_path), 20)
  assert moved == 3 and side == str(tmp_path / 'metrics.after-20.jsonl')
  assert _records(tmp_path / 'metrics.jsonl') == rows[:2]
  kept = (tmp_path / 'metrics.after-20.jsonl').read_text().splitlines()
  assert [json.loads(line) for line in kept[:2]] == rows[2:] and kept[2] == '{"env_steps": 5'
  assert run_folder.set_aside_metrics(str(tmp_path), 20) == (0, None)  # nothing left past it


def test_metrics_rows_without_a_numeric_env_steps_are_set_aside(tmp_path):
  # Edited by hand or written by a foreign tool: before, the resume was a TypeError traceback.
  good = [{'env_steps': 10}, {'env_steps': 20.0}]
  bad = ['{"env_steps": "x"}', '{"env_steps": null}', '{"env_steps": true}', '{"env_steps": NaN}',
         '[1, 2]', '"text"']
  lines = [json.dumps(good[0]), *bad[:3], json.dumps(good[1]), *bad[3:]]
  (tmp_path / 'metrics.jsonl').write_text('\n'.join(lines) + '\n')
  moved, side = run_folder.set_aside_metrics(str(tmp_path), 20)
  assert moved == len(bad) and _records(tmp_path / 'metrics.jsonl') == good
  assert sorted((tmp_path / 'metrics.after-20.jsonl').read_text().splitlines()) == sorted(bad)


def test_non_finite_config_numbers_are_rejected():
  for field, value in (('learning_rate', float('nan')), ('optimizer.max_grad_norm', float('inf')),
                       ('discount', -float('inf'))):
    config = cartpole.get_config()
    group, _, name = field.rpartition('.')
    (config[group] if group else config)[name] = value
    with pytest.raises(ConfigError, match=f'{field}: must be a finite number, got {value}'):
      validate(config)
  config = cartpole.get_config()
  config.reward_scales = (1.0,)
  config.reward_scales = (float('nan'),)
  with pytest.raises(ConfigError, match=r'reward_scales\[0\]: must be a finite number'):
    validate(config)


def _tiny_state(value=0.0):
  return LearnerState(params={'w': np.full((3, 4), value, np.float32)},
                      popart={'mu': np.zeros(2, np.float32)},
                      opt_state={'nu': np.ones(5, np.float32)}, step=np.asarray(1, np.int32))


def test_a_checkpoint_without_its_manifest_is_damaged(tmp_path):
  ckpt = Checkpointer(str(tmp_path), keep_intermediate=True)
  for step in (10, 20):
    assert ckpt.save(step, _tiny_state(step), jax.random.key(0))
  ckpt.close()
  root = tmp_path / checkpoint.SUBDIR
  os.remove(root / '20' / checkpoint.MANIFEST)  # a kill between orbax's write and the manifest
  assert checkpoint.find_intact(str(tmp_path)) == (
      10, [(20, 'no verified.json: cut off before it was verified')])


def test_saving_again_a_checkpoint_cut_off_before_its_manifest_rewrites_it(tmp_path):
  # A second signal during the final save left it without verified.json, and the
  # retry took the step as saved.
  ckpt = Checkpointer(str(tmp_path))
  assert ckpt.save(10, _tiny_state(1.0), jax.random.key(0))
  root = tmp_path / checkpoint.SUBDIR
  os.remove(root / '10' / checkpoint.MANIFEST)
  ckpt.close()
  ckpt = Checkpointer(str(tmp_path))  # as the save after the interrupted one finds it
  assert ckpt.save(10, _tiny_state(2.0), jax.random.key(0))
  assert (root / '10' / checkpoint.MANIFEST).exists()
  assert (tmp_path / checkpoint.DAMAGED_SUBDIR / '10').is_dir()
  assert checkpoint.find_intact(str(tmp_path)) == (10, [])
  assert not ckpt.save(10, _tiny_state(3.0), jax.random.key(0))  # verified: once per step
  restored = ckpt.restore(_tiny_state(), 10)
  assert float(restored['state'].params['w'][0, 0]) == 2.0
  ckpt.close()


def test_checkpoints_are_verified_and_damage_is_found(tmp_path):
  ckpt = Checkpointer(str(tmp_path), keep_intermediate=True)
  for step in (10, 20, 30):
    assert ckpt.save(step, _tiny_state(step), jax.random.key(0))
  assert not ckpt.save(30, _tiny_state(), jax.random.key(0))  # once per step
  ckpt.close()
  root = tmp_path / checkpoint.SUBDIR
  assert all((root / str(s) / checkpoint.MANIFEST).exists() for s in (10, 20, 30))
  assert checkpoint.find_intact(str(tmp_path)) == (30, [])
  with open(largest_data_file(root / '30'), 'r+b') as f:
    f.truncate(10)
  os.remove(root / '20' / 'default' / '_METADATA')
  step, damaged = checkpoint.find_intact(str(tmp_path))
  assert step == 10
  assert [s for s, _ in damaged] == [30, 20]
  assert 'bytes' in damaged[0][1] and 'when written' in damaged[0][1]
  assert damaged[1][1] == 'default/_METADATA is missing'
  restored = Checkpointer(str(tmp_path), read_only=True).restore(_tiny_state(), 10)
  assert restored['env_steps'] == 10 and float(restored['state'].params['w'][0, 0]) == 10.0
  # Another network's state: one line naming the checkpoint, not orbax's traceback.
  other = _tiny_state()._replace(params={'layer': {'w': np.zeros((3, 4), np.float32)}})
  with pytest.raises(checkpoint.CheckpointError, match='cannot restore the checkpoint at env '
                     "step 10 in .* into this run's learner state"):
    Checkpointer(str(tmp_path), read_only=True).restore(other, 10)


def test_a_checkpoint_failing_verification_is_set_aside_and_the_last_good_ones_stay(
    tmp_path, monkeypatch):
  ckpt = Checkpointer(str(tmp_path))  # keeps the last 2
  for step in (10, 20):
    ckpt.save(step, _tiny_state(), jax.random.key(0))
  real = checkpoint.damage
  monkeypatch.setattr(checkpoint, 'damage',
                      lambda d: 'a file went missing' if d.endswith('/30') else real(d))
  ckpt.save(30, _tiny_state(), jax.random.key(0))
  assert ckpt.steps() == (10, 20)  # nothing deleted for a checkpoint that did not verify
  assert ckpt.problems == [f'the checkpoint at env step 30 failed verification (a file went '
                           f'missing); moved to {tmp_path / checkpoint.DAMAGED_SUBDIR / "30"}']
  monkeypatch.setattr(checkpoint, 'damage', real)
  ckpt.save(40, _tiny_state(), jax.random.key(0))
  assert ckpt.steps() == (20, 40)
  ckpt.close()


def test_a_live_runs_unfinished_last_row_is_left_out_and_a_bad_row_is_named(tmp_path):
  """A reader of a live run can meet the row being written: a last line
  without its newline that is not yet JSON. It is left out; the same line
  with its newline, or anywhere else, is an error naming the file and line."""
  metrics = tmp_path / 'metrics.jsonl'
  metrics.write_text('{"env_steps": 1}\n{"env_steps": 2}\n{"env_steps": 3, "lo')
  assert run_folder.read_metrics(str(tmp_path)) == [{'env_steps': 1}, {'env_steps': 2}]
  metrics.write_text('{"env_steps": 1}\n{"env_steps": 2}\n{"env_steps": 3}')   # complete, no newline
  assert [r['env_steps'] for r in run_folder.read_metrics(str(tmp_path))] == [1, 2, 3]
  metrics.write_text('{"env_steps": 1}\n{"env_steps": 3, "lo\n')
  with pytest.raises(ValueError, match=r'metrics.jsonl line 2 is not a JSON metrics row'):
    run_folder.read_metrics(str(tmp_path))
  metrics.write_text('{"env_st\n{"env_steps": 2}')
  with pytest.raises(ValueError, match=r'metrics.jsonl line 1 is not a JSON metrics row'):
    run_folder.read_metrics(str(tmp_path))


def test_a_last_row_that_is_not_utf8_is_unfinished_for_readers_and_resume(tmp_path):
  """A cut write can leave bytes that are not UTF-8 (before: readers and resume
  stopped on UnicodeDecodeError without naming the file)."""
  from rundir import earlier_run
  metrics = tmp_path / 'metrics.jsonl'
  metrics.write_bytes(b'{"env_steps": 100}\n{"env_steps": 200}\n{"env_steps": 3\xff\xfe\x00')
  assert run_folder.read_metrics(str(tmp_path)) == [{'env_steps': 100}, {'env_steps': 200}]
  assert run_folder.read_jsonl(str(metrics)) == [{'env_steps': 100}, {'env_steps': 200}]
  assert earlier_run.last_env_step(str(tmp_path)) == 200
  moved, side = run_folder.set_aside_metrics(str(tmp_path), 100)   # resuming at 100
  assert moved == 2 and open(side, 'rb').read() == (b'{"env_steps": 200}\n'
                                                    b'{"env_steps": 3\xff\xfe\x00\n')
  assert run_folder.read_metrics(str(tmp_path)) == [{'env_steps': 100}]
  metrics.write_bytes(b'{"env_steps": 100}\n{"env_steps": \xff}\n{"env_steps": 300}\n')
  with pytest.raises(ValueError, match=r"metrics.jsonl line 2 is not UTF-8 text: b'"):
    run_folder.read_metrics(str(tmp_path))


def test_a_cut_off_or_foreign_archived_metrics_file_is_a_value_error_naming_it(tmp_path):
  import gzip
  rows = ''.join(json.dumps({'env_steps': i, 'loss': 0.5}) + '\n' for i in range(3000))
  data = gzip.compress(rows.encode())
  archive = tmp_path / 'metrics.jsonl.gz'
  archive.write_bytes(data[:len(data) // 2])   # an archive copied half-way
  with pytest.raises(ValueError, match=r'metrics.jsonl.gz is cut off or damaged after line \d+ '
                                       r'\(EOFError'):
    run_folder.read_metrics(str(tmp_path))
  archive.write_bytes(b'not gzip at all\n')
  with pytest.raises(ValueError, match=r'metrics.jsonl.gz is cut off or damaged after line 0'):
    run_folder.read_metrics(str(tmp_path))
  archive.write_bytes(data)
  assert len(run_folder.read_metrics(str(tmp_path))) == 3000


def test_a_config_json_that_is_not_json_is_named_to_readers_and_to_a_resume(tmp_path):
  """Readers get a ValueError naming the file (the reading tools print it in
  one line); a resume is refused with what to do."""
  (tmp_path / 'config.json').write_text('not json')
  with pytest.raises(ValueError, match=r'cannot read .*config.json \(Expecting value') as e:
    run_folder.read_config(str(tmp_path))
  assert 'workdir' not in str(e.value)
  with pytest.raises(RunFolderError, match=r'config.json .*the run cannot be checked for '
                                           r'resuming. Restore it or choose another '
                                           r'--config.workdir'):
    run_folder.check_resume(str(tmp_path), resume.as_source(cartpole.get_config()))


def test_mistyped_names_saved_values_of_another_kind():
  diffs = [('learning_rate', 'fast', 0.003), ('seed', 1, 2.0), ('log.tensorboard', 1, True),
           ('actors.num_actors', None, 2), ('tasks', {'a': 1}, [1]), ('name', 'x', 'y'),
           ('gone', 3, None)]
  assert resume.mistyped(diffs) == [('learning_rate', 'fast', 'a number'),
                                    ('log.tensorboard', 1, 'true or false'),
                                    ('tasks', {'a': 1}, 'a list')]


def test_an_older_config_json_reads_with_its_moved_settings_under_todays_names(tmp_path):
  """One migration step (configs/resume.migrate, applied by read_config): the
  env families' settings that moved out of `actors` in [27]."""
  saved = json.loads(cartpole.get_config().to_json_best_effort())
  del saved['envpool'], saved['nle']
  saved['actors'].update(envpool_threads=3, nle_workers=5, nle_ttyrecs=True)
  (tmp_path / 'config.json').write_text(json.dumps(saved))
  read = run_folder.read_config(str(tmp_path))
  assert read['envpool'] == {'threads': 3} and read['nle'] == {'workers': 5, 'ttyrecs': True}
  assert not {'envpool_threads', 'nle_workers', 'nle_ttyrecs'} & set(read['actors'])
