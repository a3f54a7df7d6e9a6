"""The Ray cluster a population runs on: its address checked, joined or
started, and its CPUs checked against a member's, all before the population
folder is made.

`--address` is unset (Ray starts on this machine with its CPUs), 'auto'
(the cluster this machine is part of) or host:port (a cluster's head).
Every way this can fail is a `ClusterError`: one line, exit status 2, and
no population folder left behind.
"""

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
  """A cluster address as (host, port), or None for 'auto'.

  Args:
    address: 'auto' or host:port.

  Returns:
    None for 'auto'; else (host, port).

  Raises:
    ClusterError: for anything else ('127.0.0.1' without a port, a port that
      is not a number in 1-65535).
  """
  if address == 'auto':
    return None
  host, sep, port = address.rpartition(':')
  if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
    raise ClusterError(f"--address must be 'auto' or host:port (a port in 1-65535), not "
                       f'{address!r}')
  return host.strip('[]'), int(port)


def check_answers(host: str, port: int, seconds: float = CONNECT_SECONDS) -> None:
  """Makes sure something accepts connections at host:port within `seconds`.

  Raises:
    ClusterError: naming the address when nothing does (refused, unknown
      host, or no answer in time).
  """
  try:
    with socket.create_connection((host, port), timeout=seconds):
      pass
  except OSError as e:
    reason = 'no answer' if isinstance(e, socket.timeout) else (e.strerror or str(e))
    raise ClusterError(
        f'nothing answers at {host}:{port} within {seconds:g} s ({reason}); start the cluster '
        f'(ray start --head --port={port}) or fix --address') from None


def check_fits(cpus: float, cpus_per_member: float, where: str) -> int:
  """How many members run at once; at least one must fit.

  Args:
    cpus: the cluster's CPUs.
    cpus_per_member: pbt.cpus_per_member.
    where: 'this machine' or the cluster's address, for the message.

  Returns:
    floor(cpus / cpus_per_member), at least 1.

  Raises:
    ClusterError: when no member fits (it would wait for ever).
  """
  at_once = int(cpus // cpus_per_member)
  if at_once < 1:
    raise ClusterError(
        f'pbt.cpus_per_member is {cpus_per_member:g} but {where} has {cpus:g} CPU(s): no member '
        f'could ever start. Set --config.pbt.cpus_per_member to at most {cpus:g}')
  return at_once


def connect(ray, address: Optional[str], cpus_per_member: float) -> int:
  """Joins or starts the Ray cluster and checks that a member fits on it.

  Without an address Ray starts on this machine with os.cpu_count() CPUs
  (its workers at nice 0 unless RAY_worker_niceness is set), after the
  CPUs are checked, with infra/orphan_watchdog.py ending its processes
  once the driver is gone, however it ends. With one, the address is parsed and, for host:port,
  probed first, so nothing waits on an address nobody answers at; after
  joining, the cluster's CPUs are checked (Ray is shut down again when they
  are too few).

  Args:
    ray: the ray module.
    address: None, 'auto' or host:port.
    cpus_per_member: pbt.cpus_per_member.

  Returns:
    How many members run at once.

  Raises:
    ClusterError: a malformed address, nothing answering, no cluster for
      'auto', or too few CPUs for one member.
  """
  if not address:
    cpus = os.cpu_count() or 1
    at_once = check_fits(cpus, cpus_per_member, 'this machine')
    # Ray starts its workers at nice 15; members are this job's main work
    # (and a run beside them would starve them at start-up).
    os.environ.setdefault('RAY_worker_niceness', '0')
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=True)
    # The Ray processes started here end with the driver, kill -9 included.
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
