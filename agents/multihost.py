"""Several processes, one run: JAX's distributed runtime and what the
training loop needs from it.

One process per host. `resolve` finds the coordinator, process count and
process id (flags, then JAX's environment variables, then JAX's own cluster
detection, e.g. SLURM); `initialize` starts `jax.distributed` with them. The
learner mesh then spans `jax.devices()` of every process, and each process
feeds its local shard of the global batch.

Host-side values (episode statistics, stop requests) cross processes through
JAX's collectives (`process_allgather`); liveness goes through the
coordination service's key-value store: every process beats there, and
`Watchdog` stops a process with one line naming the peer that died or failed,
instead of letting it wait forever on a collective.
"""

import dataclasses
import hashlib
import json
import os
import sys
import threading
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import jax
import numpy as np

ENV_VARS = {'coordinator_address': 'JAX_COORDINATOR_ADDRESS',
            'num_processes': 'JAX_NUM_PROCESSES',
            'process_id': 'JAX_PROCESS_ID'}
_KEY = 'popart_impala'       # key-value store prefix of this project
BEAT_SECONDS = 1.0           # heartbeat period of every process
# JAX's own heartbeat check aborts every process (with a stack trace) when a
# peer stays silent this much longer than the watchdog's timeout, so the
# watchdog's clear line comes first.
JAX_HEARTBEAT_MARGIN = 30


class DistributedError(ValueError):
  """A wrong or incomplete multi-process setting (flag or environment variable)."""


@dataclasses.dataclass(frozen=True)
class ProcessSpec:
  """Where this process stands in a run. Fields are None where JAX's cluster
  detection (`source` names the cluster) fills them in at initialisation."""
  coordinator_address: Optional[str]
  num_processes: Optional[int]
  process_id: Optional[int]
  source: str                 # 'flags/environment' or a cluster's name, e.g. 'slurm'


def _int_setting(name: str, value, environ_name: str) -> Optional[int]:
  if value is None:
    return None
  try:
    return int(value)
  except (TypeError, ValueError):
    raise DistributedError(f'--{name} (or {environ_name}) must be an integer, got {value!r}')


def _detected_cluster():
  """The cluster JAX would auto-detect here (SLURM, Open MPI, ...), or None."""
  try:
    from jax._src import clusters  # JAX's own detection; private, so guarded
    return next((c for c in clusters.ClusterEnv._cluster_types
                 if not c.opt_in_only_method and c.is_env_present()), None)
  except Exception:  # an API change must not break single-process runs
    return None


def resolve(coordinator_address: Optional[str] = None, num_processes: Optional[int] = None,
            process_id: Optional[int] = None,
            environ: Mapping[str, str] = os.environ) -> Optional[ProcessSpec]:
  """The run's process layout, or None for one process (nothing to start).

  Each setting comes from its flag, else its JAX_* environment variable.
  With none set, a cluster JAX detects (e.g. SLURM with more than one task)
  supplies them; on a plain machine the run is single-process. Some set and
  some not is an error naming the missing ones, unless a cluster fills them.
  """
  given = {'coordinator_address': coordinator_address, 'num_processes': num_processes,
           'process_id': process_id}
  values = {k: (v if v is not None else environ.get(ENV_VARS[k]) or None)
            for k, v in given.items()}
  values['num_processes'] = _int_setting('num_processes', values['num_processes'],
                                         ENV_VARS['num_processes'])
  values['process_id'] = _int_setting('process_id', values['process_id'], ENV_VARS['process_id'])
  cluster = _detected_cluster()
  if all(v is None for v in values.values()):
    if cluster is None or cluster.get_process_count() <= 1:
      return None
    return ProcessSpec(None, None, None, cluster.name)
  missing = [k for k, v in values.items() if v is None]
  if missing and cluster is None:
    names = ', '.join(f'--{k} (or {ENV_VARS[k]})' for k in missing)
    raise DistributedError(f'a multi-process run needs --coordinator_address, --num_processes '
                           f'and --process_id; missing {names}')
  n, i, address = values['num_processes'], values['process_id'], values['coordinator_address']
  if n is not None and n < 1:
    raise DistributedError(f'--num_processes must be >= 1, got {n}')
  if n is not None and i is not None and not 0 <= i < n:
    raise DistributedError(f'--process_id must be in 0..{n - 1} for {n} processes, got {i}')
  if address is not None:
    host, sep, port = address.rpartition(':')
    if not sep or not host or not port.isdigit():
      raise DistributedError(f'--coordinator_address must be host:port, got {address!r}')
  if n == 1 and not missing:
    return None  # one process: exactly the single-process run
  return ProcessSpec(address, n, i, cluster.name if missing else 'flags/environment')


def initialize(spec: ProcessSpec, timeout_seconds: float, connect_timeout_seconds: float) -> None:
  """Starts JAX's distributed runtime; call before anything touches a device."""
  jax.distributed.initialize(
      coordinator_address=spec.coordinator_address, num_processes=spec.num_processes,
      process_id=spec.process_id,
      initialization_timeout=int(max(1, connect_timeout_seconds)),
      heartbeat_timeout_seconds=int(timeout_seconds) + JAX_HEARTBEAT_MARGIN)


def is_multiprocess() -> bool:
  return jax.process_count() > 1


def is_primary() -> bool:
  """Process 0: the one that writes metrics, wandb and run files."""
  return jax.process_index() == 0


def learner_devices(num_local: int) -> tuple:
  """The global learner devices: the first `num_local` local devices of every
  process, process by process, so each process's rows of the batch are one
  contiguous block of the mesh."""
  by_process: Dict[int, list] = {}
  for d in jax.devices():
    by_process.setdefault(d.process_index, []).append(d)
  return tuple(d for p in sorted(by_process)
               for d in sorted(by_process[p], key=lambda d: d.id)[:num_local])


def allgather_json(value) -> List:
  """`value` (JSON-able) of every process, in process order, on every process."""
  if not is_multiprocess():
    return [value]
  from jax.experimental import multihost_utils
  data = np.frombuffer(json.dumps(value).encode(), np.uint8)
  sizes = multihost_utils.process_allgather(np.asarray([data.size], np.int64))
  # Padded to a power of two so the gather compiles for few distinct shapes.
  width = 1 << int(max(int(np.max(sizes)), 1) - 1).bit_length()
  padded = np.zeros((width,), np.uint8)
  padded[:data.size] = data
  rows = multihost_utils.process_allgather(padded)
  return [json.loads(bytes(row[:int(n)]).decode()) for row, n in zip(rows, np.ravel(sizes))]


def allgather_ints(values: Sequence[int]) -> np.ndarray:
  """[processes, len(values)]: small integers of every process, one collective."""
  row = np.asarray(values, np.int32)
  if not is_multiprocess():
    return row[None]
  from jax.experimental import multihost_utils
  return np.asarray(multihost_utils.process_allgather(row)).reshape(-1, row.size)


def replica_digest(tree) -> str:
  """A hash of every local copy of a replicated pytree, or 'differ' when two
  local copies are not bitwise equal."""
  digests = set()
  leaves = jax.tree.leaves(tree)
  for k in range(len(leaves[0].addressable_shards) if leaves else 0):
    h = hashlib.blake2b(digest_size=8)
    for leaf in leaves:
      h.update(np.ascontiguousarray(np.asarray(leaf.addressable_shards[k].data)).tobytes())
    digests.add(h.hexdigest())
  return digests.pop() if len(digests) == 1 else 'differ'


def _client():
  from jax._src import distributed  # the coordination service's key-value store
  return distributed.global_state.client


def announce_failure(message: str, wait_seconds: float = 10.0) -> None:
  """Tells the other processes this one is stopping on an error, and waits
  (at most `wait_seconds`) until their watchdogs have read it: the key-value
  store lives in process 0, and lives only as long as it does."""
  client, me, n = _client(), jax.process_index(), jax.process_count()
  try:
    client.key_value_set(f'{_KEY}/failed/{me}', message[:2000])
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
      seen = client.key_value_dir_get(f'{_KEY}/seen/')
      if len(seen) >= n - 1:
        return
      time.sleep(0.2)
  except Exception:  # the coordinator may be gone already
    pass


def exit_now(code: int) -> None:
  """Leaves without JAX's shutdown barrier (peers may be dead or gone)."""
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)


class Watchdog(threading.Thread):
  """Beats for this process and watches the others'.

  Stops this process (`on_stop(line)`, then exit status 1) with one line
  naming the peer when a peer announces a failure, stays silent for more
  than `timeout_seconds`, or the coordinator (process 0) cannot be reached.
  Beats come from this thread, so a long compile or a slow step is not
  silence; a dead or frozen process is.
  """

  def __init__(self, timeout_seconds: float, on_stop: Callable[[str], None],
               beat_seconds: float = BEAT_SECONDS):
    super().__init__(name='multihost-watchdog', daemon=True)
    self._timeout, self._beat, self._on_stop = timeout_seconds, beat_seconds, on_stop
    self._me, self._n = jax.process_index(), jax.process_count()
    self._halt = threading.Event()

  def stop(self) -> None:
    self._halt.set()

  def run(self) -> None:
    client = _client()
    beat = 0
    heard = {p: (None, time.monotonic()) for p in range(self._n) if p != self._me}
    while not self._halt.wait(self._beat):
      try:
        beat += 1
        client.key_value_set(f'{_KEY}/beat/{self._me}', str(beat), allow_overwrite=True)
        failed = dict(client.key_value_dir_get(f'{_KEY}/failed/'))
        others = {int(k.rsplit('/', 1)[1]): v for k, v in failed.items()
                  if int(k.rsplit('/', 1)[1]) != self._me}
        if others:
          p, message = sorted(others.items())[0]
          client.key_value_set(f'{_KEY}/seen/{self._me}', '1', allow_overwrite=True)
          self._stop(f'process {p} of {self._n} failed: {message}; stopping process {self._me}')
          return
        beats = {int(k.rsplit('/', 1)[1]): v
                 for k, v in client.key_value_dir_get(f'{_KEY}/beat/')}
        now = time.monotonic()
        for p, (last, since) in heard.items():
          if beats.get(p) != last:
            heard[p] = (beats.get(p), now)
          elif now - since > self._timeout:
            self._stop(f'process {p} of {self._n} has not been heard from for {now - since:.0f} s '
                       f'(distributed.timeout_seconds={self._timeout:g}): it died or hangs; '
                       f'stopping process {self._me}')
            return
      except Exception as e:  # the store is process 0's: it is gone
        if self._halt.is_set():
          return
        self._stop(f'lost the coordinator (process 0 of {self._n}): {type(e).__name__}: '
                   f'{str(e).splitlines()[0] if str(e) else ""}; stopping process {self._me}')
        return

  def _stop(self, line: str) -> None:
    if self._halt.is_set():
      return
    try:
      self._on_stop(line)
    finally:
      exit_now(1)
