#!/bin/bash
# Issue [22] item 2: a real six-game run's agent steps/s beside a real Pong run's, on one quiet machine,
# alternating, each run the first SECS seconds of a fresh training run (stopped with SIGINT), two rounds;
# the six games both with the sizes configs/actor_sizing.py gives and with the 2 EnvPool threads per pool
# they had before; then the learner alone (launch/benchmark.py --stages=learner) for each config.
# Usage: bash docs/data/speed/multitask_speed.sh OUT_DIR   (SECS=150 ROUNDS=2 LEARNER=1 by default;
# LEARNER=0 skips the learner benchmarks; SIX_BEFORE=0 skips the six games with 2 threads per pool;
# SIX_SLOW=1 adds the six games with atari_popart.py:slow_start, the PopArt settings before issue [21];
# PONG_TERM=1 adds Pong with the six games' clip per term (optimizer.clip_by=term), the same learner cost)
set -u
cd "$(dirname "$0")/../../.."
OUT=${1:?give an output folder}; mkdir -p "$OUT"
SECS=${SECS:-150}; ROUNDS=${ROUNDS:-2}; LEARNER=${LEARNER:-1}; SIX_BEFORE=${SIX_BEFORE:-1}; SIX_SLOW=${SIX_SLOW:-0}; PONG_TERM=${PONG_TERM:-0}
PY=${PY:-python}
{ date -u; nproc; lscpu | grep -E 'Model name|CPU family|^Model:'; uptime; } > "$OUT/machine.txt"
COMMON="--config.wandb.mode=disabled --config.log.tensorboard=False --config.checkpoint_every_steps=0"
real() {  # name, config, overrides...
  local name=$1 cfg=$2; shift 2
  local w=/tmp/mts_$name; rm -rf $w
  timeout -s INT $SECS $PY launch/train.py --config="$cfg" $COMMON --config.workdir=$w "$@" \
      > "$OUT/$name.log" 2>&1
  sleep 5
  cp $w/metrics.jsonl "$OUT/$name.metrics.jsonl" 2>/dev/null
  echo "$name: $(grep -m1 '^actors:' "$OUT/$name.log")"
  rm -rf $w
}
# The measurements, each "name|config|override": one list for the real runs and the learner alone.
RUNS=("pong|configs/atari_single.py:game=Pong|")
[ "$PONG_TERM" = 1 ] && RUNS+=("pong_term|configs/atari_single.py:game=Pong|--config.optimizer.clip_by=term")
RUNS+=("six_auto|configs/atari_popart.py|")
[ "$SIX_BEFORE" = 1 ] && RUNS+=("six_threads2|configs/atari_popart.py|--config.actors.envpool_threads=2")
[ "$SIX_SLOW" = 1 ] && RUNS+=("six_slow_start|configs/atari_popart.py:slow_start|")
for r in $(seq 1 $ROUNDS); do
  for run in "${RUNS[@]}"; do
    IFS='|' read -r name cfg extra <<< "$run"
    real ${name}_r$r "$cfg" $extra
  done
done
[ "$LEARNER" = 1 ] && for run in "${RUNS[@]}"; do
  IFS='|' read -r name cfg extra <<< "$run"
  [ "$name" = six_threads2 ] && continue   # EnvPool threads do not reach the learner
  $PY launch/benchmark.py --config="$cfg" $extra --stages=learner --seconds=20 --warmup=5 \
      --output="$OUT/learner_$name.json" > /dev/null 2>&1
done
$PY - "$OUT" <<'PYEOF'
import glob, json, os, statistics, sys
out = sys.argv[1]
for path in sorted(glob.glob(os.path.join(out, '*.metrics.jsonl'))):
  rows = [json.loads(l) for l in open(path)]
  rows = [r for r in rows if r.get('time', 0) >= 40 and 'sps' in r]   # past start-up and compilation
  sps = [r['sps'] for r in rows]
  learn = [r['timing/learner_step_ms'] for r in rows if 'timing/learner_step_ms' in r]
  print(f"{os.path.basename(path).split('.')[0]:18s} median sps {statistics.median(sps):7.0f} "
        f"over {len(sps)} log steps; learner step {statistics.median(learn):6.0f} ms")
for path in sorted(glob.glob(os.path.join(out, 'learner_*.json'))):
  r = json.load(open(path))
  print(os.path.basename(path), {k: v for k, v in r.items() if 'learner' in k})
PYEOF
