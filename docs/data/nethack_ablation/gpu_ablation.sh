#!/bin/bash
# PopArt vs no PopArt on the main job, on the lent GPU machine. Idempotent:
# a second call picks up the runs the first one started (setsid).
# usage: bash .whl/ablation.sh DEADLINE_SECONDS STEPS WORKERS
set -u
T0=$(date +%s); DL=$1; STEPS=$2; WORKERS=$3
R=/tmp/abl; mkdir -p $R
if [ ! -f /tmp/site/.done ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  (python3 -m zipfile -e .whl/envpool_min.zip /tmp/site && python3 -m zipfile -e .whl/envpool_assets_min.zip /tmp/site) || exit 3
  touch /tmp/site/.done
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/device.txt
  nproc >> $R/device.txt; free -g >> $R/device.txt
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
arm() {  # name config
  local n=$1 cfg=$2
  [ -f $R/$n.started ] && return
  touch $R/$n.started
  setsid bash -c "date +%s > $R/$n.t0; python3 launch/train.py --config=$cfg --config.total_env_steps=$STEPS \
    --config.network.dtype=float32 --config.log.tensorboard=false --config.wandb.mode=disabled \
    --config.actors.nle_workers=$WORKERS ${EXTRA:-} --config.workdir=$R/$n > $R/$n.log 2>&1 < /dev/null; \
    echo \$? > $R/$n.rc; date +%s > $R/$n.t1; \
    python3 launch/evaluate.py --workdir=$R/$n --episodes=32 > $R/$n.eval.log 2>&1 < /dev/null; \
    echo \$? > $R/$n.evalrc; date +%s > $R/$n.t2" > /dev/null 2>&1 < /dev/null &
}
arm popart configs/nethack_popart.py
arm nopopart configs/nethack_popart.py:popart=false
while true; do
  now=$(date +%s); el=$((now - T0))
  echo "== ${el}s load $(cut -d' ' -f1-3 /proc/loadavg) gpu $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader)"
  for n in popart nopopart; do echo "$n: $(tail -c 300 $R/$n.log | tr '\r' '\n' | tail -1)"; done
  [ -f $R/popart.evalrc ] && [ -f $R/nopopart.evalrc ] && break
  [ $el -ge $DL ] && break
  sleep 20
done
for n in popart nopopart; do
  tar czf $OUT/abl_$n.tgz -C $R --exclude=checkpoints --exclude=checkpoints.damaged $(cd $R && ls -d $n $n.* 2>/dev/null)
done
cp $R/device.txt $OUT/ 2>/dev/null
ls -la $OUT; for n in popart nopopart; do tail -5 $R/$n.log; tail -25 $R/$n.eval.log 2>/dev/null; done
