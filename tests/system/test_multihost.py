"""Multi-process training on one machine: 2 processes of 2 fake CPU devices
each, a localhost coordinator, jax.distributed as on several hosts.

The run finishes with identical params on every device of both processes;
the 2-process update equals a 1-process 4-device update of the same global
batch (PopArt included, with each task seen by one process only); a resumed
2-process run continues the counters; a process that dies or fails stops the
other with a line naming it.
"""

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from agents import learner
from infra import multihost
from tests.support import multihost_worker
from tests.support.faults import nan_reward_call
from networks import agent as agent_net

# One pytest-xdist worker runs the tests that start several processes on
# ports (these, and PBT's Ray clusters), one at a time.
pytestmark = pytest.mark.xdist_group('processes')

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SMOKE = ['--config=configs/cartpole.py:smoke', '--config.num_learner_devices=0',
         '--config.batch_size=4', '--config.actors.envs_per_actor=2',
         '--config.wandb.mode=disabled']


def _env():
  env = dict(os.environ)
  env['XLA_FLAGS'] = '--xla_force_host_platform_device_count=2'
  for name in multihost.ENV_VARS.values():
    env.pop(name, None)
  return env


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def _start(args, tmp_path, n=2, devices=(2, 2)):
  """n processes of `python args...`, each with the process flags appended
  and devices[i] fake CPU devices; output to files (a full pipe must not
  block a process that is exiting)."""
  port = _free_port()
  procs = []
  for i in range(n):
    out = open(tmp_path / f'out_{i}.txt', 'w')
    env = {**_env(), 'XLA_FLAGS': f'--xla_force_host_platform_device_count={devices[i]}'}
    procs.append(subprocess.Popen(
        [sys.executable, *args, f'--coordinator_address=localhost:{port}',
         f'--num_processes={n}', f'--process_id={i}'],
        cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True))
    procs[-1].out_path = tmp_path / f'out_{i}.txt'
  return procs


def _finish(procs, timeout=240):
  """(exit statuses, outputs); kills everything and fails on a hang."""
  deadline = time.time() + timeout
  for p in procs:
    try:
      p.wait(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
      for q in procs:
        q.kill()
      raise AssertionError('a process hung:\n' + p.out_path.read_text()[-3000:])
  return [p.returncode for p in procs], [p.out_path.read_text() for p in procs]


@contextlib.contextmanager
def _killed_on_failure(procs):
  """Kills the processes when the block fails: a run left training would
  take the cores from every later test."""
  try:
    yield
  except BaseException:
    for p in procs:
      p.kill()
    raise


def _wait_for_metrics(metrics, lines=3, timeout=300):   # start-up on a loaded 2-core machine
  deadline = time.time() + timeout
  while time.time() < deadline and not (metrics.exists()
                                        and metrics.read_text().count('\n') >= lines):
    time.sleep(0.5)
  assert metrics.exists() and metrics.read_text().count('\n') >= lines, 'the run wrote no metrics'


def _script(workdir, total_env_steps):
  """launch/multihost_local.sh with 2 processes (what the README shows)."""
  proc = subprocess.Popen(
      ['bash', 'launch/multihost_local.sh', '2', *SMOKE, f'--config.workdir={workdir}',
       f'--config.total_env_steps={total_env_steps}'],
      cwd=ROOT, env={**_env(), 'PYTHON': sys.executable}, stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True, start_new_session=True)
  try:
    out = proc.communicate(timeout=300)[0]
  except subprocess.TimeoutExpired:
    _kill_script(proc, workdir)
    raise
  return proc.returncode, out


def _kill_script(proc, workdir):
  """The script and its training processes (in process groups of their own)."""
  os.killpg(proc.pid, signal.SIGKILL)
  subprocess.run(['pkill', '-KILL', '-f', f'--config.workdir={workdir}'], check=False)


def _metrics(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return [json.loads(line) for line in f]


@pytest.mark.slow  # the full suite only, not the CI tier (docs/testing.md): two processes trained, stopped and resumed, about 3 min
def test_two_process_run_agrees_gathers_episodes_and_resumes(tmp_path):
  workdir = tmp_path / 'run'
  rc, out = _script(workdir, total_env_steps=160)  # 10 updates of 4 x 4 steps
  assert rc == 0, out
  digests = re.findall(r'params digest (\w+): identical on all 4 learner devices of 2 processes', out)
  assert len(digests) == 2 and digests[0] == digests[1], out  # one line from each process
  records = _metrics(workdir)
  assert records[-1]['env_steps'] == 160 and records[-1]['learner_steps'] == 10
  # Episodes and actor steps of both processes reach process 0's log.
  for p in (0, 1):
    assert sum(r[f'process/{p}/episodes'] for r in records) > 0
    assert records[-1][f'process/{p}/actor_env_steps'] > 0
  assert sum(r.get('episodes/CartPole', 0) for r in records) == sum(
      r['process/0/episodes'] + r['process/1/episodes'] for r in records)
  assert (workdir / 'process_1.log').exists()
  # Only process 0 writes the run's files; both resume from its checkpoint.
  rc, out = _script(workdir, total_env_steps=320)
  assert rc == 0, out
  assert out.count('resuming from the checkpoint at env step 160') == 2, out
  more = _metrics(workdir)
  assert len(more) > len(records)
  resumed = more[len(records):]
  assert resumed[0]['env_steps'] == 176 and resumed[0]['learner_steps'] == 11
  assert resumed[-1]['env_steps'] == 320 and resumed[-1]['learner_steps'] == 20
  # The checkpoint is a whole replicated state: one process goes on from it too.
  env = {k: v for k, v in _env().items() if k != 'XLA_FLAGS'}
  proc = subprocess.run([sys.executable, 'launch/train.py', *SMOKE, f'--config.workdir={workdir}',
                         '--config.total_env_steps=400'], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=180)
  assert proc.returncode == 0, proc.stderr
  assert _metrics(workdir)[-1]['learner_steps'] == 25


def test_two_process_update_equals_one_process_four_devices(tmp_path):
  rcs, outs = _finish(_start(['-m', 'tests.support.multihost_worker', 'update', str(tmp_path)],
                             tmp_path))
  assert rcs == [0, 0], outs
  got = [np.load(tmp_path / f'update_{i}.npz') for i in (0, 1)]
  mesh = learner.make_mesh(jax.devices()[:4])
  state, metrics = multihost_worker.run_updates(mesh, lambda b: learner.shard_batch(b, mesh))
  expected = [np.asarray(x) for x in jax.tree.leaves(jax.device_get(state))]
  names = [f'arr_{k}' for k in range(len(expected))]
  for k, want in zip(names, expected):
    np.testing.assert_array_equal(got[0][k], got[1][k])  # both processes hold the same state
    np.testing.assert_allclose(got[0][k], want, rtol=2e-5, atol=1e-6)
  np.testing.assert_allclose(got[0]['loss'], metrics['loss/total'], rtol=1e-5)
  # PopArt statistics moved for both tasks, each from one process's data.
  assert np.all(np.abs(np.asarray(state.popart[agent_net.VALUE_HEAD]['mu'])) > 0)


def _long_run(tmp_path):
  return _start(['launch/train.py', *SMOKE, f'--config.workdir={tmp_path / "run"}',
                 '--config.total_env_steps=100000000', '--config.distributed.timeout_seconds=20'],
                tmp_path)


@pytest.mark.slow  # the full suite only, not the CI tier (docs/testing.md): two processes, about 1 min
def test_a_killed_process_stops_the_other_naming_it(tmp_path):
  procs = _long_run(tmp_path)
  metrics = tmp_path / 'run' / 'metrics.jsonl'
  with _killed_on_failure(procs):
    _wait_for_metrics(metrics)
  procs[1].send_signal(signal.SIGKILL)
  start = time.time()
  rcs, outs = _finish(procs, timeout=120)
  assert rcs[0] == 1, outs[0][-3000:]
  assert time.time() - start < 90
  assert 'error: process 1 of 2 has not been heard from for' in outs[0], outs[0][-3000:]
  assert 'stopping process 0' in outs[0]
  assert len(metrics.read_text().splitlines()) >= 3  # what was written stays


@pytest.mark.slow  # the full suite only, not the CI tier (docs/testing.md): two processes, about 1 min
def test_a_killed_coordinator_stops_the_other(tmp_path):
  """Process 0 hosts JAX's coordination service: its death stops the others
  at once (JAX's own abort, naming the leader task), never a hang."""
  procs = _long_run(tmp_path)
  with _killed_on_failure(procs):
    _wait_for_metrics(tmp_path / 'run' / 'metrics.jsonl')
  procs[0].send_signal(signal.SIGKILL)
  rcs, outs = _finish(procs, timeout=120)
  assert rcs[1] != 0
  assert re.search(r'leader task|lost the coordinator', outs[1]), outs[1][-3000:]


@pytest.mark.slow  # the full suite only, not the CI tier (docs/testing.md): two processes, about 1 min
def test_sigterm_to_one_process_stops_both_at_one_update(tmp_path):
  procs = _long_run(tmp_path)
  metrics = tmp_path / 'run' / 'metrics.jsonl'
  with _killed_on_failure(procs):
    _wait_for_metrics(metrics)
  procs[1].send_signal(signal.SIGTERM)
  rcs, outs = _finish(procs, timeout=120)
  assert rcs == [0, 0], outs
  last = json.loads(metrics.read_text().splitlines()[-1])
  for out in outs:
    assert f'interrupted at env step {last["env_steps"]:,}' in out
  checkpoints = [int(p.name) for p in (tmp_path / 'run' / 'checkpoints').iterdir()
                 if p.name.isdigit()]
  assert max(checkpoints) == last['env_steps']


@pytest.mark.slow  # the full suite only, not the CI tier (docs/testing.md): two processes, about 1 min
def test_sigint_to_the_script_started_in_the_background_stops_both(tmp_path):
  # `launch/multihost_local.sh 2 ... &` from a script starts with SIGINT ignored,
  # which bash cannot trap: before, `kill -INT` did nothing and the run went on.
  workdir = tmp_path / 'run'
  proc = subprocess.Popen(
      ['bash', 'launch/multihost_local.sh', '2', *SMOKE, f'--config.workdir={workdir}',
       '--config.total_env_steps=1000000', '--config.log.every_seconds=0.5'],
      cwd=ROOT, env={**_env(), 'PYTHON': sys.executable}, stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True, start_new_session=True,
      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
  try:
    _wait_for_metrics(workdir / 'metrics.jsonl')
    proc.send_signal(signal.SIGINT)
    out = proc.communicate(timeout=120)[0]
  finally:
    if proc.poll() is None:
      _kill_script(proc, workdir)
  assert proc.returncode == 0, out
  last = _metrics(workdir)[-1]
  assert last['env_steps'] < 1000000
  assert out.count(f'interrupted at env step {last["env_steps"]:,}') == 2, out


def test_uneven_device_counts_stop_every_process_at_start(tmp_path):
  procs = _start(['launch/train.py', *SMOKE, f'--config.workdir={tmp_path / "run"}'],
                 tmp_path, devices=(2, 1))
  rcs, outs = _finish(procs, timeout=120)
  assert rcs == [2, 2], outs
  line = ('error: every process needs the same number of local devices; found process 0: 2, '
          'process 1: 1')
  assert all(line in out for out in outs), outs


def test_a_config_error_found_by_one_process_stops_both(tmp_path):
  """Validation that fails on process 1 only (in practice: something of that
  host's own) stops both with the same line naming process 1."""
  rcs, outs = _finish(_start(['-m', 'tests.support.multihost_worker', 'config_error',
                              str(tmp_path)], tmp_path))
  assert rcs == [2, 2], outs
  line = 'error: config field network.name: not on this host (found by process 1)'
  assert all(line in out for out in outs), outs


@pytest.mark.slow  # the full suite only, not the CI tier (docs/testing.md): two processes, about 1 min
def test_a_non_finite_loss_stops_every_process_with_the_last_good_state(tmp_path):
  procs = _start(['-m', 'tests.support.train_with_faults',
                  f'--nan_reward_step={nan_reward_call(3, 4)}',
                  *SMOKE, f'--config.workdir={tmp_path / "run"}',
                  '--config.total_env_steps=100000000'], tmp_path)
  rcs, outs = _finish(procs, timeout=180)
  assert rcs == [1, 1], outs
  line = ('error: NonFiniteError: non-finite loss/total (nan) at learner step 3 (env step 48); '
          'the last good state is saved at env step 32 in')
  assert all(line in out for out in outs), outs
  checkpoints = [p.name for p in (tmp_path / 'run' / 'checkpoints').iterdir() if p.name.isdigit()]
  assert checkpoints == ['32']


@pytest.mark.slow  # the full suite only, not the CI tier (docs/testing.md): two processes per case, about 1 min each
@pytest.mark.parametrize('failing', [1, 0])
def test_an_actor_error_in_one_process_stops_both_naming_it(tmp_path, failing):
  """Process 0 failing is the harder case: it hosts the coordination service,
  so it waits until the other has stopped before it exits."""
  rcs, outs = _finish(_start(['-m', 'tests.support.multihost_worker', 'actor_fails', str(tmp_path),
                              f'--failing_process={failing}'], tmp_path))
  other = 1 - failing
  assert rcs == [1, 1], outs
  assert 'env exploded on purpose' in outs[failing]
  assert re.search(rf"error: process {failing} of 2 failed: ActorFailed: actor-{failing} failed: "
                   rf"RuntimeError\('env exploded on purpose'\); stopping process {other}",
                   outs[other]), outs[other][-3000:]
  assert 'lost the coordinator' not in outs[other] and 'leader task' not in outs[other]
