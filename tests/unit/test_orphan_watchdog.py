"""infra/orphan_watchdog.py: what a process started ends when it is killed."""

import os
import signal
import subprocess
import sys
import time

from infra import orphan_watchdog

# A parent that starts a child and a grandchild (both would outlive it),
# starts its watchdog, prints their pids and waits to be killed.
_PARENT = r'''
import subprocess, sys, time
from infra import orphan_watchdog
child = subprocess.Popen([sys.executable, '-c',
    'import subprocess, sys, time; g = subprocess.Popen(["sleep", "300"]); print(g.pid, flush=True); time.sleep(300)'],
    stdout=subprocess.PIPE, text=True, start_new_session=True)
grandchild = int(child.stdout.readline())
orphan_watchdog.start(__import__('os').getpid())
time.sleep(2.5)   # the watchdog notes them
print(child.pid, grandchild, flush=True)
time.sleep(300)
'''


def _alive(pid):
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
  except OSError:
    return False


def test_kill_9_of_the_parent_ends_its_descendants_within_seconds():
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  parent = subprocess.Popen([sys.executable, '-c', _PARENT], cwd=root, stdout=subprocess.PIPE,
                            text=True)
  child, grandchild = (int(x) for x in parent.stdout.readline().split())
  assert _alive(child) and _alive(grandchild)
  parent.send_signal(signal.SIGKILL)
  parent.wait()
  deadline = time.time() + 15
  while (_alive(child) or _alive(grandchild)) and time.time() < deadline:
    time.sleep(0.2)
  assert not _alive(child) and not _alive(grandchild), 'orphans outlived the watchdog'


# A parent whose child starts a grandchild only when told (a file appears),
# as Ray's raylet starts a worker in the driver's last second.
_LATE = r'''
import os, subprocess, sys, time
from infra import orphan_watchdog
go = sys.argv[1]
child = subprocess.Popen([sys.executable, '-c', f"""
import os, subprocess, time
while not os.path.exists({go!r}):
  time.sleep(0.01)
g = subprocess.Popen(['sleep', '300'])
print(g.pid, flush=True)
time.sleep(300)
"""], stdout=subprocess.PIPE, text=True, start_new_session=True)
orphan_watchdog.start(os.getpid())
time.sleep(2.5)   # the watchdog notes the child
print(child.pid, flush=True)
print(child.stdout.readline().strip(), flush=True)   # the late grandchild
time.sleep(300)
'''


def test_a_process_started_in_the_parents_last_moment_ends_with_the_rest(tmp_path):
  """A grandchild started after the watchdog's last look, just before the
  parent's kill -9, ends within POLL_SECONDS + GRACE_SECONDS (and slack).
  Before: it outlived the parent (Ray's worker by 15-30 s, this one for ever)."""
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  go = tmp_path / 'go'
  parent = subprocess.Popen([sys.executable, '-c', _LATE, str(go)], cwd=root,
                            stdout=subprocess.PIPE, text=True)
  child = int(parent.stdout.readline())
  go.write_text('')
  grandchild = int(parent.stdout.readline())
  parent.send_signal(signal.SIGKILL)
  parent.wait()
  try:
    deadline = time.time() + orphan_watchdog.POLL_SECONDS + orphan_watchdog.GRACE_SECONDS + 3
    while (_alive(child) or _alive(grandchild)) and time.time() < deadline:
      time.sleep(0.1)
    assert not _alive(child) and not _alive(grandchild), 'the late grandchild outlived the watchdog'
  finally:
    for pid in (child, grandchild):
      if _alive(pid):
        os.kill(pid, signal.SIGKILL)


def test_descendants_finds_the_whole_tree_and_not_the_root():
  child = subprocess.Popen([sys.executable, '-c',
                            'import subprocess; subprocess.Popen(["sleep", "30"]).wait()'])
  try:
    deadline = time.time() + 10
    while time.time() < deadline:
      found = orphan_watchdog.descendants(os.getpid())
      if len(found) >= 2:
        break
      time.sleep(0.1)
    assert child.pid in found and len(found) >= 2 and os.getpid() not in found
  finally:
    for pid in orphan_watchdog.descendants(child.pid):
      os.kill(pid, signal.SIGKILL)
    child.kill()
    child.wait()
