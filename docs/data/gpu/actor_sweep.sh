#!/bin/bash
# Issue [22], prepared for the next lent GPU machine: the whole loop's agent steps/s at the auto sizes
# (configs/actor_sizing.py) and as the actor counts grow, for Pong (Nature CNN), the six-game PopArt config and the main job; one device call of about 8
# minutes. Here first: bash docs/data/gpu/make_gpusite.sh. Then the device tool, carry [".gpusite"]:
#   bash docs/data/gpu/actor_sweep.sh
# Each line of $OUT/sweep.jsonl is one launch/benchmark.py result (its --output JSON).
set -u
PY=${PY:-python3}
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD/.gpusite:$PWD PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc; lscpu | grep 'Model name';
  $PY -c "import jax; print(jax.__version__, jax.devices())"; } > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"
bench() {  # config, stages, overrides...
  local cfg=$1 stages=$2; shift 2
  timeout ${T:-150} $PY launch/benchmark.py --config="$cfg" --stages="$stages" --seconds=12 --warmup=8 \
      --output=/tmp/b.json "$@" > /tmp/b.log 2>&1 \
    && $PY -c "import json,sys; r=json.load(open('/tmp/b.json')); r['overrides']=sys.argv[1:]; print(json.dumps(r))" "$@" >> "$OUT/sweep.jsonl" \
    || { echo "FAILED: $cfg $*"; tail -3 /tmp/b.log; }
  tail -1 "$OUT/sweep.jsonl" | cut -c1-300
}
P=configs/atari_single.py:game=Pong
bench $P raw,loop,train   # the auto sizes (configs/actor_sizing.py): 16 cores -> 4 actors x 4 threads
bench $P train --config.actors.num_actors=2 --config.actors.envpool_threads=2
bench $P raw,train --config.actors.num_actors=4 --config.actors.envpool_threads=3
bench $P raw,train --config.actors.num_actors=8 --config.actors.envpool_threads=2
S=configs/atari_popart.py
bench $S train
bench $S train --config.actors.num_actors=2 --config.actors.envpool_threads=2
bench $S train --config.actors.num_actors=6 --config.actors.envpool_threads=2
N=configs/nethack_popart.py
bench $N train
bench $N train --config.actors.num_actors=1 --config.actors.nle_workers=2
bench $N train --config.actors.num_actors=2 --config.actors.nle_workers=6
ls -la "$OUT"
