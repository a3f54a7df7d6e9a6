"""The Ray cluster a population runs on: `--address` unset (Ray starts here), 'auto' or host:port,
checked, joined or started, and its CPUs checked against a member's before the population folder is
made. Every failure is a one-line `ClusterError`."""

import os
import socket
from typing import Optional

from infra import orphan_watchdog

# How long a host:port may take to accept a connection before the address
# is reported as one nothing answers at.
CONNECT_SECONDS = 10.0


class ClusterError(RuntimeError):
  """The cluster cannot be reached or cannot hold one member."""


def parse_address(address: str):
  """(host, port) of a host:port address, None for 'auto'; ClusterError for anything else."""
  if address == 'auto':
    return None
  host, sep, port = address.rpartition(':')
  if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
    raise ClusterError(f"--address must be 'auto' or host:port (a port in 1-65535), not "
                       f'{address!r}')
  return host.strip('[]'), int(port)


def check_answers(host: str, port: int, seconds: float = CONNECT_SECONDS) -> None:
  """Raises ClusterError unless something accepts connections at host:port within `seconds`."""
  try:
    with socket.create_connection((host, port), timeout=seconds):
      pass
  except OSError as e:
    reason = 'no answer' if isinstance(e, socket.timeout) else (e.strerror or str(e))
    raise ClusterError(
        f'nothing answers at {host}:{port} within {seconds:g} s ({reason}); start the cluster '
        f'(ray start --head --port={port}) or fix --address') from None


def check_fits(cpus: float, cpus_per_member: float, where: str) -> int:
  """How many members run at once, floor(cpus / cpus_per_member); ClusterError
  when none fits (it would wait for ever)."""
  at_once = int(cpus // cpus_per_member)
  if at_once < 1:
    raise ClusterError(
        f'pbt.cpus_per_member is {cpus_per_member:g} but {where} has {cpus:g} CPU(s): no member '
        f'could ever start. Set --config.pbt.cpus_per_member to at most {cpus:g}')
  return at_once


def connect(ray, address: Optional[str], cpus_per_member: float) -> int:
  """Joins or starts the Ray cluster; returns how many members run at once.

  Without an address Ray starts here on os.cpu_count() CPUs, watched by infra/orphan_watchdog.py so
  its processes end with the driver. A host:port is probed first, so nothing waits on an address
  nobody answers at; a cluster with too few CPUs is left again. Raises ClusterError.
  """
  if not address:
    cpus = os.cpu_count() or 1
    at_once = check_fits(cpus, cpus_per_member, 'this machine')
    # Ray starts its workers at nice 15; members are this job's main work.
    os.environ.setdefault('RAY_worker_niceness', '0')
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=True)
    orphan_watchdog.start(os.getpid())
    return at_once
  where = parse_address(address)
  if where is not None:
    check_answers(*where)
  try:
    ray.init(address=address, include_dashboard=False, log_to_driver=True)
  except ConnectionError as e:
    first = next((line for line in str(e).splitlines() if line.strip()), '')
    raise ClusterError(f'cannot join the Ray cluster at --address={address}: {first}') from None
  try:
    return check_fits(ray.cluster_resources().get('CPU', 0), cpus_per_member,
                      f'the cluster at {address}')
  except ClusterError:
    ray.shutdown()
    raise
