#!/bin/bash
# The script that ran the four H200 rows of docs/popart_atari.md (issue [21]) on a lent GPU machine.
# .gpusite/ held the packages the machine's image lacks, unpacked from cp312 wheels (envpool, its
# Atari ROMs, ml_collections, rlax, distrax, tfp-nightly, dm-tree, dm-env, gymnasium, nle, tensorboardX);
# the device tool carried it. Two calls back to back: `start 540`, then `collect 230`.
# start | collect <seconds>; smoke=1 PAUSE=10000 PY=<python> W=<dir> OUT=<dir> for a local check.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/.gpusite:$PWD PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
PY=${PY:-python3}
W=${W:-/root/gpuruns}
OUT=${OUT:-/tmp/out}
phase=$1; secs=$2
t0=$(date +%s)
pack() {
  (cd $W && tar czf $OUT/.runs.tgz --exclude='checkpoints' --exclude='wandb' --exclude='events.out*' . 2>/dev/null && mv $OUT/.runs.tgz $OUT/runs.tgz)
}
if [ "$phase" = start ]; then
  mkdir -p $W $OUT
  { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc; lscpu | grep 'Model name';
    $PY -c "import jax,flax,envpool,rlax;print(jax.__version__,flax.__version__,jax.devices())"; } > $W/device.txt 2>&1
  cat $W/device.txt
  if [ "${smoke:-0}" = 1 ]; then V=",smoke"; EXTRA="--config.total_env_steps=20000"; else V=""; EXTRA=""; fi
  # The runs had 2 actor threads (2 EnvPool threads per pool where not set): fixed here, since the
  # configs now size actors to the machine (configs/actor_sizing.py) and four runs share it.
  COMMON="--config.wandb.mode=disabled --config.network.dtype=float32 --config.checkpoint_every_steps=1500000 --config.actors.num_actors=2 $EXTRA"
  PA="--config=configs/atari_popart.py:games=Pong+Carnival,steps=1500000$V"
  launch() { name=$1; n=$2; shift 2
    setsid nohup nice -n $n $PY launch/train.py "$@" $COMMON --config.workdir=$W/$name > $W/$name.log 2>&1 < /dev/null & }
  launch a2_s1 0 $PA --config.popart.start=debiased --config.optimizer.clip_by=term --config.seed=1 --config.actors.envpool_threads=4
  launch clipped_s1 0 --config=configs/atari_multitask.py:games=Pong+Carnival,steps=1500000$V,plain --config.seed=1 --config.actors.envpool_threads=4
  launch adv_task 5 $PA --config.vtrace.normalize_advantages_per=task --config.pause_at_env_steps=${PAUSE:-1500000} --config.actors.envpool_threads=2
  launch clipterm 5 $PA --config.optimizer.clip_by=term --config.pause_at_env_steps=${PAUSE:-1500000} --config.actors.envpool_threads=2
fi
while [ $(( $(date +%s) - t0 )) -lt $secs ]; do
  sleep 30; pack
  for f in $W/*.log; do echo "$(basename $f): $(tail -1 $f | cut -c1-150)"; done
done
pack; ls -la $OUT
