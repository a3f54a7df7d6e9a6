"""Ends a driver's descendants (Ray's GCS, raylet, workers) when the driver
dies, kill -9 included.

A small process in its own session (Ctrl-C to the driver's group does not
reach it) notes the descendants every second; once the driver is gone it
sends SIGTERM, then SIGKILL after GRACE_SECONDS, to them and to what they
started since (a worker Ray started in the driver's last second): none
outlives the driver by more than POLL_SECONDS + GRACE_SECONDS. A process is
signalled only while its start time is the one noted, so a reused pid is left alone.

  python -m infra.orphan_watchdog <driver pid>
"""

import os
import signal
import subprocess
import sys
import time
from typing import Dict, Optional

POLL_SECONDS = 1.0
GRACE_SECONDS = 2.0


def _stat(pid: int) -> Optional[tuple]:
  """(parent pid, start time) of a live process from /proc, or None."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      text = f.read()
  except OSError:
    return None
  fields = text[text.rindex(')') + 2:].split()   # after 'pid (comm) '
  if fields[0] == 'Z':
    return None
  return int(fields[1]), int(fields[19])


def descendants(root: int) -> Dict[int, int]:
  """{pid: start time} of every live process below `root` (not root itself)."""
  parents, starts = {}, {}
  for name in os.listdir('/proc'):
    if name.isdigit():
      info = _stat(int(name))
      if info is not None:
        parents[int(name)], starts[int(name)] = info
  found, frontier = {}, [root]
  while frontier:
    parent = frontier.pop()
    for pid, ppid in parents.items():
      if ppid == parent and pid not in found:
        found[pid] = starts[pid]
        frontier.append(pid)
  return found


def _signal_all(noted: Dict[int, int], sig: int) -> int:
  sent = 0
  for pid, start in noted.items():
    info = _stat(pid)
    if info is not None and info[1] == start and pid != os.getpid():
      try:
        os.kill(pid, sig)
        sent += 1
      except OSError:
        pass
  return sent


def watch(driver: int) -> None:
  """Notes the driver's descendants until it is gone, then ends them."""
  noted: Dict[int, int] = {}
  driver_start = (_stat(driver) or (None, None))[1]
  while True:
    info = _stat(driver)
    if info is None or info[1] != driver_start:
      break
    noted.update({p: s for p, s in descendants(driver).items() if p != os.getpid()})
    time.sleep(POLL_SECONDS)
  # What the noted processes started since the last poll (Ray's raylet starts
  # workers until it is ended) is theirs to end too: looked for again at each signal.
  for sig in (signal.SIGTERM, signal.SIGKILL):
    for pid in list(noted):
      if _stat(pid) is not None and _stat(pid)[1] == noted[pid]:
        noted.update({p: s for p, s in descendants(pid).items() if p != os.getpid()})
    if not _signal_all(noted, sig):
      return
    if sig == signal.SIGTERM:
      time.sleep(GRACE_SECONDS)


def start(driver: int) -> subprocess.Popen:
  """Starts the watchdog of `driver` in its own session; it exits after the driver."""
  return subprocess.Popen([sys.executable, '-m', 'infra.orphan_watchdog', str(driver)],
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, start_new_session=True)


if __name__ == '__main__':
  watch(int(sys.argv[1]))
