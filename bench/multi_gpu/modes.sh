#!/usr/bin/env bash
# The several-GPU modes of bench/gpu.sh (which builds grid first and sets OUT).
#
#   bash bench/gpu.sh multi [extra --set KEY=VALUE for every run...]
# A host with 2 or more GPUs: bench/multi_gpu/bench_multi.py over 2 ranks, and 4 where there
# are 4 GPUs (the gradient averaging alone, DDP against all_reduce, packed and sharded
# averaging), then configs/density_256.toml and configs/nerf_scene_gpu.toml trained by 1
# process (python -m train) and by 2 and 4 (torchrun --standalone --nproc_per_node=N -m
# train), pictures off. MULTI_COUNTS sets the process counts (default "1 2", "1 2 4" with 4
# GPUs), ALLREDUCE_COUNTS the rank counts of bench_multi.py (default: MULTI_COUNTS; empty
# skips it). DENSITY_SET / NERF_SET add --set arguments to one config's runs (e.g.
# NERF_SET="--set train.steps=2000"), MULTI_CONFIGS picks the configs (default: density_256
# nerf_scene_gpu); MULTI_JOBS instead lists "label:config:process counts:--set,K=V,..." runs
# separated by ';' (a label "<name>+weak" run is compared with "<name>-1"). MULTI_KEEP=1
# keeps the runs of an earlier call on the same machine (MULTI_RUNS, default
# /tmp/multi_runs) in the table. Writes to $OUT: multi.log (all output), allreduce-N.json/.md
# (N ranks), multi.json (summaries, metrics, the table's numbers) and multi.md (the table:
# steps/s, speed-up, scaling efficiency, the all-reduce's share of the step at the final
# resolution; bench/multi_gpu/multi_table.py). Before the runs, bench/multi_gpu/multi_step.py
# times one density_256 step at 256^3 (host vs wall) on 1 and 2 processes for each of
# PROBE_BATCHES (default 1048576 4194304; PROBE_BATCHES= skips it).
#
#   bash bench/gpu.sh steps
# A host with 2 GPUs: bench/multi_gpu/multi_step.py alone (the host-vs-wall probe of `multi`,
# with CPU time, context switches and busy threads per rank, and pinned ranks), in
# $OUT/steps.log; PROBE_BATCHES and PROBE_ARGS as for `multi`.
set -uo pipefail
cd "$(dirname "$0")/../.."
what=$1
shift
status=0

# bench/multi_gpu/multi_step.py for each of PROBE_BATCHES on 1 process, 1 process with one CPU thread
# (as torchrun sets for 2), 2 processes, and 2 processes pinned to disjoint CPUs (--pin);
# PROBE_ARGS go to every run (e.g. "--cuda-graph off --formula-target": the step before
# issue 21). One JSON line per rank; $1: where the JSON files go, $2: the log.
step_probe() {
  for batch in ${PROBE_BATCHES-1048576 4194304}; do
    for n in 1 1t 2 2p; do
      launch="python3" pin=""
      [ "$n" = 1t ] && launch="env OMP_NUM_THREADS=1 python3"
      [ "${n:0:1}" = 2 ] && launch="python3 -m torch.distributed.run --standalone --nproc_per_node=2"
      [ "$n" = 2p ] && pin="--pin"
      echo "multi_step: batch $batch, $n" | tee -a "$2"
      # shellcheck disable=SC2086  # launch, pin and PROBE_ARGS are word lists
      $launch bench/multi_gpu/multi_step.py --batch-size "$batch" --json "$1/step-$batch-$n.json" $pin \
        ${PROBE_ARGS:-} 2>&1 | grep -v "^\*\*\*\|OMP_NUM_THREADS" | tee -a "$2" | grep "^{"
    done
  done
}

if [ "$what" = multi ]; then
  runs=${MULTI_RUNS:-/tmp/multi_runs}
  [ -n "${MULTI_KEEP:-}" ] || rm -rf "$runs"
  mkdir -p "$runs"
  : >"$OUT/multi.log"
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  echo "GPUs: $gpus" | tee -a "$OUT/multi.log"
  [ "$gpus" -ge 2 ] || echo "multi: needs 2 GPUs, found $gpus" | tee -a "$OUT/multi.log"
  nvidia-smi topo -m 2>&1 | tee -a "$OUT/multi.log"
  # process counts: 1, 2 and 4 where there are 4 GPUs (MULTI_COUNTS overrides)
  counts_default=$([ "$gpus" -ge 4 ] && echo "1 2 4" || echo "1 2")
  counts_all=${MULTI_COUNTS:-$counts_default}
  for n in ${ALLREDUCE_COUNTS-$counts_all}; do
    [ "$n" = 1 ] && continue
    # shellcheck disable=SC2086  # ALLREDUCE_ARGS is a word list
    python3 -m torch.distributed.run --standalone --nproc_per_node="$n" bench/multi_gpu/bench_multi.py \
      --json "$OUT/allreduce-$n.json" ${ALLREDUCE_ARGS:-} >>"$OUT/multi.log" 2>&1 || status=1
    cat "$OUT/allreduce-$n.md" 2>/dev/null
  done
  # one training step at 256^3 timed piece by piece (host vs wall), 1 and 2 processes
  step_probe "$runs" "$OUT/multi.log"
  # MULTI_JOBS: "label:config:process counts:--set K=V,--set K=V" entries; a label
  # "<name>+<variant>" is compared with "<name>-1" (bench/multi_gpu/multi_table.py)
  if [ -n "${MULTI_JOBS:-}" ]; then
    IFS=';' read -ra jobs <<<"$MULTI_JOBS"
  else
    jobs=()
    for c in ${MULTI_CONFIGS:-density_256 nerf_scene_gpu}; do
      sets=$([ "$c" = density_256 ] && echo "${DENSITY_SET:-}" || echo "${NERF_SET:-}")
      jobs+=("$c:$c:$counts_all:${sets// /,}")
    done
  fi
  for job in "${jobs[@]}"; do
    IFS=':' read -r label config counts sets <<<"$job"
    extra=${sets//,/ }
    for n in $counts; do
      launch="python3 -m train"
      [ "$n" = 1 ] || launch="python3 -m torch.distributed.run --standalone --nproc_per_node=$n -m train"
      start=$(date +%s)
      # shellcheck disable=SC2086  # launch and extra are word lists
      $launch --config "configs/$config.toml" --out "$runs/$label-$n" \
        --set output.pictures=false --set output.progress=false $extra "$@" \
        >"$runs/$label-$n.json" 2>>"$OUT/multi.log" || status=1
      echo "$label, $n process(es): $(($(date +%s) - start)) s for the whole command" \
        | tee -a "$OUT/multi.log"
    done
    python3 bench/multi_gpu/multi_table.py "$runs" "$OUT/multi.json" "$OUT/multi.md" \
      "$OUT"/allreduce-*.json >>"$OUT/multi.log" 2>&1 || status=1
    cat "$OUT/multi.md"
  done
fi
if [ "$what" = steps ]; then
  runs=${MULTI_RUNS:-/tmp/multi_runs}
  mkdir -p "$runs"
  : >"$OUT/steps.log"
  nvidia-smi topo -m 2>&1 | tee -a "$OUT/steps.log"
  nproc | sed 's/^/CPUs: /' | tee -a "$OUT/steps.log"
  step_probe "$runs" "$OUT/steps.log"
  cp "$runs"/step-*.json "$OUT/" 2>/dev/null
fi
exit $status
