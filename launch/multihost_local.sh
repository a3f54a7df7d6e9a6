#!/usr/bin/env bash
# Runs one training job as N processes on this machine, as N hosts would:
# a localhost coordinator, each process with its own fake CPU devices.
#
#   launch/multihost_local.sh 2 --config=configs/cartpole.py:smoke --config.workdir=runs/mh
#
# Environment: DEVICES (fake CPU devices per process, default 2), PORT (the
# coordinator's, default a free one), PYTHON (default python). Every
# process's output goes to the terminal with a [pN] prefix and to
# <workdir>/process_N.log when --config.workdir is given. The script exits
# with the first non-zero status of any process (0 when all succeed).
set -uo pipefail
cd "$(dirname "$0")/.."

# A job started with & from a script has SIGINT (and SIGQUIT) ignored at
# entry, and bash cannot trap a signal ignored at entry: `kill -INT` would do
# nothing. Start over once with SIGINT and SIGTERM at their defaults, so that
# the trap below forwards them.
if [[ -z "${MULTIHOST_LOCAL_SIGNALS:-}" ]]; then
  export MULTIHOST_LOCAL_SIGNALS=1
  exec "${PYTHON:-python}" -c 'import os, signal, sys
for s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(s, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])' "$BASH" "launch/$(basename "$0")" "$@"
fi

if [[ $# -lt 2 || ! "$1" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 NUM_PROCESSES --config=... [--config.workdir=...] [train.py flags]" >&2
  exit 2
fi
n="$1"; shift
python="${PYTHON:-python}"
devices="${DEVICES:-2}"
port="${PORT:-$("$python" -c 'import socket; s = socket.socket(); s.bind(("localhost", 0)); print(s.getsockname()[1])')}"
workdir=""
for arg in "$@"; do
  case "$arg" in --config.workdir=*) workdir="${arg#--config.workdir=}" ;; esac
done
[[ -n "$workdir" ]] && mkdir -p "$workdir"

# Ctrl-C or SIGTERM to this script reaches every process once: train.py
# stops them all at one update with a final checkpoint. The processes get
# process groups of their own (set -m while they start), so that a Ctrl-C
# in a terminal, sent to the whole foreground group, does not reach them a
# second time beside the forwarded SIGTERM (a second signal stops without a
# final checkpoint).
pids=()
trap 'kill -TERM "${pids[@]}" 2>/dev/null' INT TERM
set -m
for ((i = 0; i < n; i++)); do
  log="/dev/null"
  [[ -n "$workdir" ]] && log="$workdir/process_$i.log"
  XLA_FLAGS="--xla_force_host_platform_device_count=$devices" \
    "$python" -u launch/train.py "$@" \
      --coordinator_address="localhost:$port" --num_processes="$n" --process_id="$i" \
    > >(tee -a "$log" | sed -u "s/^/[p$i] /") 2>&1 &
  pids+=("$!")
done
set +m

status=0
for i in "${!pids[@]}"; do
  # wait returns early (status > 128) when a trapped signal arrives: wait again.
  while true; do
    wait "${pids[$i]}"
    rc=$?
    kill -0 "${pids[$i]}" 2>/dev/null || break
  done
  if [[ $rc -ne 0 && $status -eq 0 ]]; then
    status=$rc
    echo "[multihost_local] process $i exited with status $rc" >&2
  fi
done
exit "$status"
