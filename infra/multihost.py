"""Several processes, one run: JAX's distributed runtime.

One process per host: `resolve` finds the layout (flags, JAX_* variables or cluster detection),
`initialize` starts `jax.distributed` and the watchdog (infra/peer_watch.py). Host-side values cross
processes through `process_allgather`.
"""

import dataclasses
import hashlib
import json
import os
from typing import Dict, List, Mapping, Optional, Sequence

import jax
import numpy as np

from infra import peer_watch
from infra.settings import setting

ENV_VARS = {'coordinator_address': 'JAX_COORDINATOR_ADDRESS',
            'num_processes': 'JAX_NUM_PROCESSES',
            'process_id': 'JAX_PROCESS_ID'}
# JAX's own heartbeat check aborts every process (with a stack trace) when a peer stays silent this
# much longer than the watchdog's timeout, so the watchdog's clear line comes first.
JAX_HEARTBEAT_MARGIN = 30


class DistributedError(ValueError):
  """A wrong or incomplete multi-process setting (flag or environment variable)."""


@dataclasses.dataclass(frozen=True)
class ProcessSpec:
  """Where this process stands in a run; fields are None where the detected
  cluster (`source`) fills them in at initialisation."""
  coordinator_address: Optional[str]
  num_processes: Optional[int]
  process_id: Optional[int]
  source: str                 # 'flags/environment' or a cluster's name, e.g. 'slurm'


def _seconds_at_least_5(value):
  if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 5:
    return f'must be a number of seconds >= 5, got {value!r}'
  return None


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
  """Several processes (the config's `distributed` group; launch/train.py's --coordinator_address,
  --num_processes, --process_id). Unused by a single-process run."""
  timeout_seconds: float = setting(60.0, 'a peer silent this long stops the run, naming it',
                                   _seconds_at_least_5)
  connect_timeout_seconds: float = setting(300.0, 'wait this long for every process at start',
                                           _seconds_at_least_5)


def _int_setting(name: str, value, environ_name: str) -> Optional[int]:
  if value is None:
    return None
  try:
    return int(value)
  except (TypeError, ValueError):
    raise DistributedError(f'--{name} (or {environ_name}) must be an integer, got {value!r}')


# Clusters whose launchers set the process layout in environment variables, as JAX detects them:
# SLURM inside an srun step (not a plain sbatch script, which is one process whatever --ntasks says)
# and Open MPI's mpirun. JAX's other detectors (Kubernetes, cloud TPUs) query services, and are left
# to explicit flags.
DETECTED_CLUSTERS = ('slurm', 'ompi')


def _detected_cluster(environ: Mapping[str, str]):
  """The cluster JAX would auto-detect here, or None."""
  if 'SLURM_STEP_ID' not in environ and 'OMPI_MCA_orte_hnp_uri' not in environ:
    return None
  try:
    from jax._src import clusters  # JAX's own detection; private, so guarded
    return next((c for c in clusters.ClusterEnv._cluster_types
                 if c.name in DETECTED_CLUSTERS and c.is_env_present()), None)
  except Exception:  # an API change must not break single-process runs
    return None


def resolve(coordinator_address: Optional[str] = None, num_processes: Optional[int] = None,
            process_id: Optional[int] = None,
            environ: Mapping[str, str] = os.environ) -> Optional[ProcessSpec]:
  """The run's process layout, or None for one process (nothing to start).

  Each setting comes from its flag, else its JAX_* variable, else a cluster
  JAX detects; num_processes 1 is the single-process run too.

  Raises:
    DistributedError: settings missing and no cluster to fill them, or a bad count, id or address.
  """
  given = {'coordinator_address': coordinator_address, 'num_processes': num_processes,
           'process_id': process_id}
  values = {k: (v if v is not None else environ.get(ENV_VARS[k]) or None)
            for k, v in given.items()}
  values['num_processes'] = _int_setting('num_processes', values['num_processes'],
                                         ENV_VARS['num_processes'])
  values['process_id'] = _int_setting('process_id', values['process_id'], ENV_VARS['process_id'])
  cluster = _detected_cluster(environ)
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
  """Starts JAX's distributed runtime and this process's watchdog; call before any device use."""
  jax.distributed.initialize(
      coordinator_address=spec.coordinator_address, num_processes=spec.num_processes,
      process_id=spec.process_id,
      initialization_timeout=int(max(1, connect_timeout_seconds)),
      heartbeat_timeout_seconds=int(timeout_seconds) + JAX_HEARTBEAT_MARGIN)
  peer_watch.start_watchdog(timeout_seconds)


def check_uniform_devices() -> None:
  """Raises DistributedError unless every process has as many local devices
  (the global mesh and process_allgather assume it)."""
  counts: Dict[int, int] = {}
  for d in jax.devices():
    counts[d.process_index] = counts.get(d.process_index, 0) + 1
  if len(set(counts.values())) > 1:
    listed = ', '.join(f'process {p}: {n}' for p, n in sorted(counts.items()))
    raise DistributedError(f'every process needs the same number of local devices; found '
                           f'{listed} (restrict them with CUDA_VISIBLE_DEVICES or '
                           'JAX_LOCAL_DEVICE_IDS)')


def is_multiprocess() -> bool:
  return jax.process_count() > 1


def is_primary() -> bool:
  """Process 0: the one that writes metrics, wandb and run files."""
  return jax.process_index() == 0


def learner_devices(num_local: int) -> tuple:
  """The first `num_local` local devices (by id) of every process, in process
  order, so each process's batch rows are one contiguous block of the mesh."""
  by_process: Dict[int, list] = {}
  for d in jax.devices():
    by_process.setdefault(d.process_index, []).append(d)
  return tuple(d for p in sorted(by_process)
               for d in sorted(by_process[p], key=lambda d: d.id)[:num_local])


def allgather_json(value) -> List:
  """[value of process 0, value of process 1, ...] of a JSON-able value; a collective."""
  if not is_multiprocess():
    return [value]
  from jax.experimental import multihost_utils
  data = np.frombuffer(json.dumps(value).encode(), np.uint8)
  sizes = multihost_utils.process_allgather(np.asarray([data.size], np.int32))
  # Padded to a power of two so the gather compiles for few distinct shapes.
  width = 1 << int(max(int(np.max(sizes)), 1) - 1).bit_length()
  padded = np.zeros((width,), np.uint8)
  padded[:data.size] = data
  rows = multihost_utils.process_allgather(padded)
  return [json.loads(bytes(row[:int(n)]).decode()) for row, n in zip(rows, np.ravel(sizes))]


def allgather_ints(values: Sequence[int]) -> np.ndarray:
  """int32 [processes, len(values)] of every process's `values` (a collective; equal lengths)."""
  row = np.asarray(values, np.int32)
  if not is_multiprocess():
    return row[None]
  from jax.experimental import multihost_utils
  return np.asarray(multihost_utils.process_allgather(row)).reshape(-1, row.size)


def replica_digest(tree) -> str:
  """A 16-hex-digit BLAKE2b digest of a replicated pytree's local copies, or
  'differ' when two copies are not bitwise equal."""
  digests = set()
  leaves = jax.tree.leaves(tree)
  for k in range(len(leaves[0].addressable_shards) if leaves else 0):
    h = hashlib.blake2b(digest_size=8)
    for leaf in leaves:
      h.update(np.ascontiguousarray(np.asarray(leaf.addressable_shards[k].data)).tobytes())
    digests.add(h.hexdigest())
  return digests.pop() if len(digests) == 1 else 'differ'
