#!/bin/bash
# The side by side of issue 32, one after the other on an idle machine.
cd /work/main && source .venv/bin/activate
S=runs/sbs
python -c "import nle, torch, jax; print('nle', nle.__version__, 'torch', torch.__version__, 'jax', jax.__version__)" > $S/versions.txt 2>&1
date +%s > $S/nle.t0
(cd /tmp && python /work/main/runs/sbs/procmon.py /work/main/$S/nle_res.csv python -m nle.agent.agent --env NetHackScore-v0 \
    --num_actors 4 --batch_size 8 --unroll_length 80 --use_lstm --disable_cuda \
    --total_steps 500000 --save_ttyrec_every 0 --savedir /work/main/$S/nle_agent) > $S/nle.log 2>&1
echo $? > $S/nle.rc; date +%s > $S/nle.t1
python $S/procmon.py $S/ours_res.csv python launch/train.py --config=configs/nethack_popart.py:chars=mon-hum-neu-mal \
    --config.total_env_steps=500000 --config.workdir=runs/monk_500k > $S/ours.log 2>&1
echo $? > $S/ours.rc; date +%s > $S/ours.t1
