#!/usr/bin/env bash
# Issue [26]'s screen on Pong + Carnival at 1M agent steps per game: each arm's
# run, then its evaluation (30 games per game) and its archive under
# docs/data/reward_scales/<name>. Two runs at a time on a 2-core machine.
#
#   bash docs/data/reward_scales/screen.sh sweep        # per-sample beta, 500k per game, seed 0
#   bash docs/data/reward_scales/screen.sh screen       # every arm, seeds 0 and 1
#   bash docs/data/reward_scales/screen.sh one NAME     # one run of the tables below
#   bash docs/data/reward_scales/screen.sh one six26_clipped_tuned_s1   # a six-game arm, seed 1
#
# RUNS (default /work/runs) holds the run folders; BETA is the per-sample beta
# the sweep chose. A run folder that exists is resumed by the same command
# (train.py goes on from its checkpoint), so the script can be stopped and
# started again.
set -euo pipefail
cd "$(dirname "$0")/../../.."
RUNS=${RUNS:-/work/runs}
BETA=${BETA:-3e-4}
PY=${PY:-.venv/bin/python}
GAMES=games=Pong+Carnival

declare -A ARM=(
  [popart_default]="--config=configs/atari_popart.py:$GAMES,steps=1000000"
  [popart_per_sample]="--config=configs/atari_popart.py:$GAMES,steps=1000000 --config.popart.step_per=sample --config.popart.beta=$BETA"
  [popart_hl_gauss]="--config=configs/atari_popart.py:$GAMES,steps=1000000 --config.value.head=hl_gauss"
  [symlog_hl_gauss]="--config=configs/atari_multitask.py:$GAMES,steps=1000000,rewards=none --config.value.head=hl_gauss --config.value.bins=255 --config.value.limit=20"
  [clipped_tuned]="--config=configs/atari_multitask.py:$GAMES,steps=1000000"
  # The six seed games (atari_common.SEED_GAMES) at 1M per game; today's default ran
  # there as popart_atari/six_a2t_mb3b_lr5e4_warmup_end05 and _s1 (the same config).
  [six26_popart_per_sample]="--config=configs/atari_popart.py:steps=1000000 --config.popart.step_per=sample --config.popart.beta=$BETA"
  [six26_clipped_tuned]="--config=configs/atari_multitask.py:steps=1000000"
  # Today's default with one global-norm clip instead of the clip per term (the
  # default's speed cost): does the clip per term buy anything on six games?
  [six26_popart_global_clip]="--config=configs/atari_popart.py:steps=1000000 --config.optimizer.clip_by=global"
)
# The sweep: per-sample statistics at three betas, paused at 500k agent steps per game
# (the budget, and so the learning-rate schedule, of the full runs). The chosen beta's
# run went on to the full budget: it is popart_per_sample's seed 0.
declare -A SWEEP=(
  [beta3e-5]="--config=configs/atari_popart.py:$GAMES,steps=1000000 --config.popart.step_per=sample --config.popart.beta=3e-5 --config.pause_at_env_steps=1000000"
  [beta3e-4]="--config=configs/atari_popart.py:$GAMES,steps=1000000 --config.popart.step_per=sample --config.popart.beta=3e-4 --config.pause_at_env_steps=1000000"
  [beta3e-3]="--config=configs/atari_popart.py:$GAMES,steps=1000000 --config.popart.step_per=sample --config.popart.beta=3e-3 --config.pause_at_env_steps=1000000"
)

run() {   # run NAME FLAGS...: train, evaluate, archive
  local name=$1; shift
  [[ $name == six26_* ]] || name=pc26_$name
  local dir=$RUNS/$name
  $PY launch/train.py "$@" --config.workdir="$dir" >> "$RUNS/$name.log" 2>&1
  if [[ "$*" != *pause_at_env_steps* ]]; then
    $PY launch/evaluate.py --workdir="$dir" --episodes=30 >> "$RUNS/$name.log" 2>&1
  fi
  $PY launch/archive_run.py "$dir" "docs/data/reward_scales/$name" --overwrite >> "$RUNS/$name.log" 2>&1
}

pairs() {   # pairs NAME=FLAGS ...: two at a time
  local jobs=()
  for item in "$@"; do
    local name=${item%%=*} flags=${item#*=}
    # shellcheck disable=SC2086
    run "$name" $flags &
    jobs+=($!)
    if (( ${#jobs[@]} == 2 )); then wait "${jobs[@]}"; jobs=(); fi
  done
  if (( ${#jobs[@]} )); then wait "${jobs[@]}"; fi
}

case "${1:-}" in
  sweep)
    items=(); for b in beta3e-5 beta3e-4 beta3e-3; do items+=("sweep_$b=${SWEEP[$b]}"); done
    pairs "${items[@]}" ;;
  screen)
    items=()
    for arm in popart_per_sample popart_hl_gauss symlog_hl_gauss clipped_tuned; do
      items+=("$arm=${ARM[$arm]}" "${arm}_s1=${ARM[$arm]} --config.seed=1")
    done
    pairs "${items[@]}" ;;
  one)
    name=$2; base=${name%_s1}
    flags=${ARM[$base]}; [[ $name == *_s1 ]] && flags="$flags --config.seed=1"
    # shellcheck disable=SC2086
    run "$name" $flags ;;
  *) echo "usage: $0 sweep | screen | one NAME" >&2; exit 2 ;;
esac
