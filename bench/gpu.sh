#!/usr/bin/env bash
# One call on a GPU machine: build grid against the installed torch (JIT, sm_90 by default),
# run the whole test suite (CUDA tests included), then the benchmarks. Logs, the benchmark
# table and its JSON go to $OUT (default bench/results).
#   bash bench/gpu.sh [all|tests|bench] [extra bench_ops.py arguments...]
# TESTS="tests/test_x.py ..." runs only those tests; PROBES="gather small_f scatter" picks the
# probes (bench/probes/<name>_probe.py) run after the benchmark (default gather; PROBES= runs
# none).
#   bash bench/gpu.sh nerf [extra --set KEY=VALUE for both runs and N1...]
# `nerf`: configs/nerf_scene_gpu.toml (NERF_CONFIG) trained with both backends (NERF_BACKENDS;
# the scene is generated on the GPU first), and N1 (bench/bench_nerf.py, with the same --set) on the
# native run's final checkpoint. Writes to $OUT: nerf.log (all output), nerf_runs.json (both summaries and
# metrics), bench_nerf.json/.md and the native run's test_views.png, curves.png, turntable.gif.
#   bash bench/gpu.sh dvgo [extra bench_dvgo.py arguments, e.g. --ours-steps N --set K=V...]
# `dvgo`: bench/bench_dvgo.py: the realistic scene (configs/nerf_realistic_gpu.toml, 400x400,
# generated on the GPU), DirectVoxGO trained and tested on it (its code in DVGO_DIR, default
# .anchors/dvgo: a copy of the anchor folder, carried along, never part of the repository),
# then ours for as long, evaluated at 1/3, 2/3 and all of DirectVoxGO's training time.
# Writes to $OUT/dvgo: dvgo.md (the table: PSNR, SSIM against training seconds, peak
# memory), dvgo.json, dvgo.log (DirectVoxGO's output), ours/ (the run directory). Measured
# on an H100: ours builds in ~65 s, the scene generates in ~65 s, DirectVoxGO's extensions
# compile in ~290 s and its run takes 300-450 s with its test renders: more than one 10-minute
# call. So, on one warm machine, call after call: `bash bench/gpu.sh dvgo-build`, `bash
# bench/gpu.sh dvgo --dvgo-only`, then `bash bench/gpu.sh dvgo --dvgo-log
# bench/results/dvgo_work/dvgo.log --ours-steps N` (N: DirectVoxGO's training seconds x ~160
# steps/s, with margin; ours stops being evaluated by time at T and runs on to N).
# DirectVoxGO on our grid (bench/dvgo_grid.py), beside its own run: `bash bench/gpu.sh dvgo
# --dvgo-only --work /tmp/own`, then `bash bench/gpu.sh dvgo --grid ours --dvgo-only --against
# /tmp/own/dvgo.log` ($OUT/dvgo/dvgo_grid.md). Run DirectVoxGO only through this script: its
# TORCH_EXTENSIONS_DIR and TORCH_CUDA_ARCH_LIST are what dvgo-build compiled with, and other
# values recompile its extensions (minutes).
#   bash bench/gpu.sh dvgo --scene unbounded|forward [extra bench/dvgo_unbounded.py arguments...]
# (`forward`: --setting llff, DirectVoxGO's NDC setting, on configs/nerf_forward_gpu.toml's scene.)
# `dvgo --scene unbounded`: bench/dvgo_unbounded.py: the unbounded scene
# (configs/nerf_unbounded_gpu.toml: 400x400, 175 training and 25 test views), written in
# LLFF's layout (bench/dvgo_llff.py: the views interleaved so that llffhold = 8 holds out
# exactly the test views), DirectVoxGO v2's own unbounded setting on it (no coarse stage,
# 40000 iterations of 4096 rays, a contracted 320^3 grid, its distortion loss from
# bench/dvgo_v2_shims.py), then ours for as long, evaluated at T/2 and T. Writes to
# $OUT/dvgo: dvgo_unbounded.md / .json, dvgo.log, ours/. Its work folder (the LLFF copy,
# DirectVoxGO's logs and renders) is bench/results/dvgo_unbounded_work. DirectVoxGO v2 runs
# longer than one 10-minute call, so it runs detached and later calls wait for it, on one
# warm machine: `bash bench/gpu.sh dvgo-build`; `bash bench/gpu.sh dvgo --scene unbounded
# --dvgo-only --detach` (returns at once; the detached run generates the scene, ~1-2 min,
# writes the LLFF copy, then trains and tests DirectVoxGO); `bash bench/gpu.sh dvgo --scene
# unbounded --wait 560`, again until it prints "the detached run exited 0" (before: "still
# running" and DirectVoxGO's last lines; the last call copies dvgo_unbounded.json, dvgo.log
# and dvgo_test_000.png into $OUT/dvgo); then ours: `bash bench/gpu.sh dvgo --scene
# unbounded --dvgo-log bench/results/dvgo_unbounded_work/dvgo.log --ours-steps N` (N:
# DirectVoxGO's training seconds x ours' steps/s, with margin), itself with --detach and
# then --wait calls when DirectVoxGO trained more than ~8 minutes. A quick check of the
# whole chain first: add `--dvgo-iters 2000` (and `--ours-steps 2000`).
#   bash bench/gpu.sh dvgo-build
# `dvgo-build`: only JIT-builds DirectVoxGO's CUDA extensions (DVGO_DIR), so that a later
# `dvgo --dvgo-only` call on the same warm machine spends its 10 minutes on training.
#   bash bench/gpu.sh variants --config C --steps N --variant "NAME: KEY=VALUE ..." ...
# `variants`: bench/nerf_variants.py: variants of one config trained at once, at the same
# step count (their quality side by side; the shared GPU makes their seconds meaningless).
# Writes $OUT/variants.json/.md and each run's log.
#   bash bench/gpu.sh multi [extra --set KEY=VALUE for every run...]
# `multi` (a host with 2 or more GPUs): bench/bench_multi.py over 2 ranks, and 4 where there
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
# resolution). Before the runs, bench/multi_step.py times one density_256 step at 256^3
# (host vs wall) on 1 and 2 processes for each of PROBE_BATCHES (default 1048576 4194304;
# PROBE_BATCHES= skips it).
#   bash bench/gpu.sh loop [extra --set KEY=VALUE...]
# `loop`: configs/default.toml and configs/density_256.toml (LOOP_CONFIGS) trained with
# train.cuda_graph = auto (captured steps) and off (op by op): PSNR, points/s, steps/s and
# times from each summary, in $OUT/loop.log.
#   bash bench/gpu.sh steps
# `steps` (a host with 2 GPUs): bench/multi_step.py alone (the host-vs-wall probe of `multi`,
# with CPU time, context switches and busy threads per rank, and pinned ranks), in
# $OUT/steps.log; PROBE_BATCHES and PROBE_ARGS as for `multi`.
#   bash bench/gpu.sh wheel
# `wheel`: the release check. The sdist, then a wheel built from it with the installed torch
# (pip wheel --no-build-isolation --no-deps: CUDA kernels for TORCH_CUDA_ARCH_LIST), installed
# into a new venv (its own site-packages holds only the wheel; this python's site-packages,
# torch included, come after it through a .pth file: nothing is downloaded). From a folder
# outside the checkout it checks that `import grid` is the installed build with CUDA kernels,
# runs the op tests (a copy of tests/; WHEEL_TESTS picks the files, default those that need
# no checkout) and `grid-train --config default.toml` on the GPU. No JIT build of the
# checkout. GRID_NO_CUDA=1 builds and checks a CPU wheel instead (the same steps on a machine
# without a GPU). Writes to $OUT: wheel.log (all output) and the sdist and wheel (dist/); the venv
# and the run directory stay in WHEEL_DIR (default /tmp/grid_wheel).
#   bash bench/gpu.sh sdf
# `sdf`: S2 (bench/sdf_seconds.py): the whole sdf command, points in, mesh out, as a user
# runs it: grid built in place first (setup.py build_ext --inplace, as `pip install -e`
# does; no JIT load at start-up), then configs/sdf_scan_gpu.toml on each of SDF_POINTS
# (default .anchors/scans/*.npy, oriented points as bench/sdf_inputs.py makes them) at
# SDF_RESOLUTIONS (default 256,512), full and mesh-only. Writes $OUT/sdf.json, sdf.md.
#   bash bench/gpu.sh view
# `view`: grid built as for `sdf`; NERF_CONFIG (default configs/nerf_realistic_gpu.toml)
# trained, then bench/bench_viewer.py --render-only --size 512 on it ($OUT/view.log); with
# viser (installed from the wheels in VIEWER_WHEELS, default .anchors/wheels, when missing:
# no download) bench_viewer.py --client python --size 512 on the same run
# ($OUT/view_client.json) and the steps/s of NERF_CONFIG trained without and with --view
# ($OUT/view_cost/view_cost.md, .json; VIEW_COST_ARGS=--moving adds a moving camera).
set -uo pipefail
cd "$(dirname "$0")/.."

# bench/multi_step.py for each of PROBE_BATCHES on 1 process, 1 process with one CPU thread
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
      $launch bench/multi_step.py --batch-size "$batch" --json "$1/step-$batch-$n.json" $pin \
        ${PROBE_ARGS:-} 2>&1 | grep -v "^\*\*\*\|OMP_NUM_THREADS" | tee -a "$2" | grep "^{"
    done
  done
}
what=${1:-all}
shift || true
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} PYTHONUNBUFFERED=1
export MAX_JOBS=${MAX_JOBS:-$(nproc)} TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/grid_ext}
status=0

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv \
  | tee "$OUT/device.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" \
  | tee -a "$OUT/device.txt"

if [ "$what" = sdf ] || [ "$what" = view ]; then
  start=$(date +%s)
  python3 setup.py build_ext --inplace >"$OUT/build.log" 2>&1 || { tail -n 60 "$OUT/build.log"; exit 1; }
  python3 -c "import grid, grid._backend as b; print('built', b.source, 'cuda kernels:', b.has_cuda_kernels)"
  echo "build: $(($(date +%s) - start)) s"
  # A pip-installed torch has its bytecode (.pyc) compiled at install; where the installed
  # packages have none and Python may not write any (PYTHONDONTWRITEBYTECODE set, as on
  # the GPU machines), every process compiles torch's sources again (seconds): a cache
  # elsewhere, filled once, stands in for the .pyc files of an install.
  python3 -c "import sys, torch, os; d = os.path.dirname(torch.__file__)
print('bytecode: dont_write', sys.dont_write_bytecode, 'torch/__pycache__', os.path.isdir(d + '/__pycache__'), 'writable', os.access(d, os.W_OK))"
  unset PYTHONDONTWRITEBYTECODE
  export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-/tmp/pycache}
  python3 -c "import train.__main__, torch._dynamo, scipy.sparse.csgraph, scipy.spatial, scipy.ndimage, matplotlib.pyplot"
  if [ -n "${TESTS:-}" ]; then
    # shellcheck disable=SC2086  # TESTS is a list of paths
    python3 -m pytest -q -p no:cacheprovider -rfE $TESTS 2>&1 | tee "$OUT/tests.log" | tail -n 15
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  fi
fi
if [ "$what" = view ]; then
  run=/tmp/view_run
  python3 -m train --config "${NERF_CONFIG:-configs/nerf_realistic_gpu.toml}" --out "$run" --overwrite \
    --set output.pictures=false --set output.progress=false 2>&1 | tail -n 3 | tee "$OUT/view.log"
  python3 bench/bench_viewer.py "$run" --render-only --size 512 2>&1 | tee -a "$OUT/view.log"
  wheels=${VIEWER_WHEELS:-.anchors/wheels}
  if ! python3 -c "import viser" 2>/dev/null && [ -d "$wheels" ]; then  # no network: carried wheels
    python3 -m pip install -q --no-index --find-links "$wheels" viser 2>&1 \
      | tail -n 3 | tee -a "$OUT/view.log"
  fi
  if python3 -c "import viser" 2>/dev/null; then
    # the viewer with a browser-free client (bench/viser_client.py) on the trained run, timed
    # at the client and in the viewer's log; then the config trained without --view, with
    # --view alone, with --view and a client holding a still camera (VIEW_COST_ARGS=--moving
    # adds a client orbiting all the time: one more training run)
    python3 bench/bench_viewer.py "$run" --client python --size 512 --json "$OUT/view_client.json" \
      2>&1 | grep -v "[│╭╰]" | tee -a "$OUT/view.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    # shellcheck disable=SC2086  # VIEW_COST_ARGS is a word list
    python3 bench/bench_viewer.py --train-cost "${NERF_CONFIG:-configs/nerf_realistic_gpu.toml}" \
      --out "$OUT/view_cost" --runs /tmp/view_cost_runs ${VIEW_COST_ARGS:-} 2>&1 | tee -a "$OUT/view.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  else
    echo "view: no viser (VIEWER_WHEELS: a folder of its wheels): no client measurements" \
      | tee -a "$OUT/view.log"
  fi
fi
if [ "$what" = sdf ]; then
  if [ -n "${SDF_PROFILE:-}" ]; then  # where a 256^3 mesh-only run's seconds go
    { python3 -X importtime -c "import train.__main__" 2>&1 | sort -t'|' -k2 -n | tail -n 12
      python3 -c "import time; t = time.perf_counter(); import torch; a = time.perf_counter()
torch.zeros(1, device='cuda'); b = time.perf_counter(); import torch._dynamo; c = time.perf_counter()
print(f'import torch {a - t:.2f} s, CUDA init {b - a:.2f} s, import torch._dynamo {c - b:.2f} s')"
      python3 -m cProfile -o /tmp/sdf.prof -m train --config configs/sdf_scan_gpu.toml \
        --out /tmp/sdf_profile --overwrite --set points.path="$SDF_PROFILE" --set eval.chamfer=false \
        --set output.pictures=false --set output.progress=false
      python3 -c "import pstats; pstats.Stats('/tmp/sdf.prof').sort_stats('cumulative').print_stats('main/(train|grid)', 50)"
    } >"$OUT/profile.txt" 2>&1
  fi
  # shellcheck disable=SC2086  # SDF_POINTS is a list of paths
  python3 bench/sdf_seconds.py ${SDF_POINTS:-.anchors/scans/*.npy} --config configs/sdf_scan_gpu.toml \
    --resolutions "${SDF_RESOLUTIONS:-256,512}" --json "$OUT/sdf.json" --md "$OUT/sdf.md" "$@" \
    2>&1 | tee "$OUT/sdf.log" | tail -n 30
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
# scenes-wait on a machine that holds no pool (a fresh one: the last was taken back) would
# spend its call waiting for nothing: it stops at once, before building
pool=bench/results/scenes_pool  # scenes-pool's work folder
if [ "$what" = scenes-wait ] && [ ! -f "$pool/pool.log" ]; then
  echo "scenes-wait: no pool on this machine ($pool/pool.log absent): start it with scenes-pool"
  exit 2
fi
if [ "$what" != wheel ] && [ "$what" != sdf ] && [ "$what" != view ]; then
  start=$(date +%s)
  GRID_VERBOSE_BUILD=1 python3 -c "import grid, grid._backend as b; print('built', b.source, 'cuda kernels:', b.has_cuda_kernels)" \
    >"$OUT/build.log" 2>&1 || { tail -n 60 "$OUT/build.log"; exit 1; }
  tail -n 1 "$OUT/build.log"
  echo "build: $(($(date +%s) - start)) s"
fi

if [ "$what" = all ] || [ "$what" = tests ]; then
  # shellcheck disable=SC2086  # TESTS is a list of paths
  python3 -m pytest -q -p no:cacheprovider -rfE --durations=8 ${TESTS:-tests/} 2>&1 \
    | tee "$OUT/tests.log" | tail -n 30
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  python3 bench/bench_ops.py --device cuda --json "$OUT/bench.json" "$@" 2>&1 | tee "$OUT/bench.log" \
    | tail -n 60
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  # probes: gather = the S1 forward's bound (the same loads and stores without the cell
  # computation); small_f = the small-F kernel variants on S5's rays; scatter = the S1 / S2
  # backward's atomic scatter alone, in the points' order and sorted by cell
  for probe in ${PROBES-gather}; do
    python3 "bench/probes/${probe}_probe.py" --json "$OUT/${probe}_probe.json" 2>&1 \
      | tee -a "$OUT/bench.log" | tail -n 40
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
fi
if [ "$what" = nerf ]; then
  runs=${NERF_RUNS:-/tmp/nerf_runs}
  nerf_config=${NERF_CONFIG:-configs/nerf_scene_gpu.toml}
  rm -rf "$runs"
  : >"$OUT/nerf.log"
  {
    backends=${NERF_BACKENDS:-native grid_sample}
    for backend in $backends; do
      pictures=$([ "$backend" = native ] && echo true || echo false)
      python3 -m train --config "$nerf_config" --out "$runs/$backend" \
        --set grid.backend=$backend --set output.pictures=$pictures --set output.progress=false \
        "$@" >"$runs.$backend.json" || status=1
      tail -n 4 "$runs/$backend/metrics.jsonl" 2>/dev/null | cut -c1-300
    done
    python3 bench/bench_nerf.py --config "$nerf_config" \
      --checkpoint "$runs/native/checkpoint.pt" --json "$OUT/bench_nerf.json" \
      ${NERF_PROFILE:+--profile} "$@" || status=1
  } >"$OUT/nerf.log" 2>&1
  grep -v "^  " "$OUT/nerf.log" | tail -n 60
  python3 - "$runs" "$OUT/nerf_runs.json" <<'PY'
import json, pathlib, sys
runs, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
result = {}
for d in sorted(p for p in runs.iterdir() if p.is_dir()):
    summary = d / "summary.json"
    metrics = d / "metrics.jsonl"
    result[d.name] = {
        "summary": json.loads(summary.read_text()) if summary.exists() else None,
        "metrics": [json.loads(l) for l in metrics.read_text().splitlines()] if metrics.exists() else [],
    }
out.write_text(json.dumps(result, indent=2))
PY
  for f in test_views.png curves.png turntable.gif; do cp "$runs/native/$f" "$OUT/" 2>/dev/null; done
fi
if [ "$what" = dvgo ]; then
  mkdir -p "$OUT/dvgo"
  script=bench/bench_dvgo.py
  if [ "${1:-}" = --scene ]; then  # the bounded scene is bench_dvgo.py's own
    case "${2:-}" in
      unbounded) set -- "${@:3}" ;;
      forward) set -- --setting llff --config configs/nerf_forward_gpu.toml \
        --work bench/results/dvgo_forward_work "${@:3}" ;;
      *) echo "dvgo: --scene takes unbounded or forward, got '${2:-}'"; exit 2 ;;
    esac
    script=bench/dvgo_unbounded.py
  fi
  python3 "$script" --dvgo "${DVGO_DIR:-.anchors/dvgo}" --out "$OUT/dvgo" "$@" 2>&1 \
    | tee "$OUT/dvgo/$(basename "$script" .py).log" | grep -v "^  " | tail -n 40
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [ "$what" = dvgo-build ]; then
  start=$(date +%s)
  (cd "${DVGO_DIR:-.anchors/dvgo}" && python3 -c "import sys; sys.path[:0] = ['shim', '.']
from lib import utils, dvgo, dcvgo, dmpigo") >"$OUT/dvgo_build.log" 2>&1 || status=1
  tail -n 5 "$OUT/dvgo_build.log"
  echo "DirectVoxGO build: $(($(date +%s) - start)) s"
fi
if [ "$what" = variants ]; then
  runs=${VARIANT_RUNS:-/tmp/nerf_variants}
  python3 bench/nerf_variants.py --out "$runs" --json "$OUT/variants.json" "$@" 2>&1 \
    | tee "$OUT/variants.log" | tail -n 30
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  cp "$runs"/*.log "$OUT/" 2>/dev/null
fi
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
    python3 -m torch.distributed.run --standalone --nproc_per_node="$n" bench/bench_multi.py \
      --json "$OUT/allreduce-$n.json" ${ALLREDUCE_ARGS:-} >>"$OUT/multi.log" 2>&1 || status=1
    cat "$OUT/allreduce-$n.md" 2>/dev/null
  done
  # one training step at 256^3 timed piece by piece (host vs wall), 1 and 2 processes
  step_probe "$runs" "$OUT/multi.log"
  # MULTI_JOBS: "label:config:process counts:--set K=V,--set K=V" entries; a label
  # "<name>+<variant>" is compared with "<name>-1" (bench/multi_table.py)
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
    python3 bench/multi_table.py "$runs" "$OUT/multi.json" "$OUT/multi.md" \
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
if [ "$what" = loop ]; then
  runs=${LOOP_RUNS:-/tmp/loop_runs}
  rm -rf "$runs"
  : >"$OUT/loop.log"
  for config in ${LOOP_CONFIGS:-default density_256}; do
    for mode in auto off; do
      python3 -m train --config "configs/$config.toml" --out "$runs/$config-$mode" \
        --set train.cuda_graph=$mode --set output.pictures=false --set output.progress=false \
        "$@" >>"$OUT/loop.log" 2>&1 || status=1
      python3 -c "import json, sys; s = json.load(open(sys.argv[1]))
r = s['steps'] / s['train_seconds']
print(f\"{sys.argv[2]:12s} cuda_graph={sys.argv[3]:4s} graphed={s.get('cuda_graph')} psnr {s['psnr']:.3f} dB  \"
      f\"{s['points_per_second'] / 1e6:.1f}M points/s  {r:.1f} steps/s  train {s['train_seconds']:.2f} s  \"
      f\"whole {s['seconds']:.2f} s\")" "$runs/$config-$mode/summary.json" "$config" "$mode" \
        | tee -a "$OUT/loop.log"
    done
  done
fi
if [ "$what" = wheel ]; then
  work=$(realpath -m "${WHEEL_DIR:-/tmp/grid_wheel}")
  ops_tests="test_contract.py test_double_backward.py test_sample.py test_sample_deterministic.py
    test_smoothstep.py test_total_variation.py test_trilinear.py test_voxel_grid.py"
  rm -rf "$work" "$OUT/dist"
  mkdir -p "$work/run" "$OUT/dist"
  (
    set -e
    unset PYTHONPATH
    start=$(date +%s)
    python3 -c "import sys; from setuptools import build_meta; build_meta.build_sdist(sys.argv[1])" \
      "$OUT/dist" >"$work/sdist.log" 2>&1 || { tail -n 30 "$work/sdist.log"; exit 1; }
    rm -rf densegrid.egg-info  # the sdist's by-product; it would pose as an installed densegrid
    python3 -m pip wheel --no-build-isolation --no-deps --no-index -w "$OUT/dist" "$OUT"/dist/*.tar.gz
    echo "sdist and wheel: $(($(date +%s) - start)) s"
    ls -l "$OUT/dist"
    python3 -m zipfile -l "$OUT"/dist/*.whl | awk 'NR > 1 {print $1}' | cut -d/ -f1 | sort -u \
      | tr '\n' ' ' | sed 's/^/wheel top level: /'
    echo
    python3 -m venv --without-pip "$work/venv"
    py="$work/venv/bin/python"
    own=$("$py" -c "import site; print(site.getsitepackages()[0])")
    python3 -c "import pathlib, site, torch
print('\n'.join(dict.fromkeys([*site.getsitepackages(), str(pathlib.Path(torch.__file__).parents[1])])))" \
      >"$own/_outer_site.pth"
    "$py" -m pip install --no-deps --no-index --ignore-installed "$OUT"/dist/*.whl
    cp -r tests "$work/run/tests"
    cd "$work/run"
    "$py" - "$work/venv" <<'PY'
import importlib.metadata, os, sys
import grid, grid._backend as b, torch
print("grid", grid.__version__, "from", grid.__file__, "| ops:", b.source, "| CUDA kernels:",
      b.has_cuda_kernels, "| torch", torch.__version__, "| metadata", importlib.metadata.version("densegrid"))
assert grid.__file__.startswith(sys.argv[1]), "import grid did not find the installed wheel"
assert b.source == "installed", "grid._C is not the installed one"
cpu_only = os.environ.get("GRID_NO_CUDA", "0") not in ("", "0")
assert b.has_cuda_kernels or cpu_only, "the wheel holds no CUDA kernels"
PY
    # shellcheck disable=SC2086  # a list of files
    (cd tests && "$py" -m pytest -q -p no:cacheprovider -rfE --durations=8 ${WHEEL_TESTS:-$ops_tests})
    case ${GRID_NO_CUDA:-0} in "" | 0) device=cuda ;; *) device=cpu ;; esac
    "$work/venv/bin/grid-train" --config default.toml --out runs/default --set device="$device" \
      --set output.pictures=false --set output.progress=false >"$work/grid_train.log"
    "$py" -c "import json, sys; s = json.load(open(sys.argv[1]))
print('grid-train:', {k: s.get(k) for k in ('device', 'grid_ops', 'psnr', 'steps', 'seconds')})" \
      runs/default/summary.json
  ) 2>&1 | tee "$OUT/wheel.log" | tail -n 60
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
# `nerfacc` (bash bench/gpu.sh nerfacc [extra bench_nerfacc.py arguments]): bench/bench_nerfacc.py,
# our VoxelGrid as the field of a nerfacc occupancy-grid model against the same model on
# F.grid_sample: configs/nerf_realistic_gpu.toml's scene (400x400, generated on the GPU when
# absent), NERFACC_STEPS (default 3000) steps of 8192 rays each, then the test views. nerfacc
# (a benchmark-only dependency) is installed from NERFACC_WHEELS (default .anchors/wheels) when
# missing, and its CUDA ops are JIT-built before the benchmark (into TORCH_EXTENSIONS_DIR: a
# minute or two, once a machine); grid is JIT-built above as for `bench`. Writes to $OUT:
# nerfacc.md (the table), nerfacc.json, nerfacc.log, nerfacc_build.log and
# nerfacc_profile_<backend>.txt (NERFACC_PROFILE more steps under torch.profiler, default 20).
if [ "$what" = nerfacc ]; then
  wheels=${NERFACC_WHEELS:-.anchors/wheels}
  python3 -c "import nerfacc" 2>/dev/null \
    || python3 -m pip install --no-index --no-deps --find-links "$wheels" nerfacc 2>&1 | tail -n 2
  python3 -c "import rich" 2>/dev/null \
    || python3 -m pip install --no-index --find-links "$wheels" rich 2>&1 | tail -n 2
  start=$(date +%s)
  python3 -c "import nerfacc; from nerfacc.cuda._backend import _C; assert _C is not None, 'no nvcc'
print('nerfacc', nerfacc.__version__, 'CUDA ops:', _C.__file__)" >"$OUT/nerfacc_build.log" 2>&1 \
    || { tail -n 40 "$OUT/nerfacc_build.log"; exit 1; }
  tail -n 1 "$OUT/nerfacc_build.log"
  echo "nerfacc build: $(($(date +%s) - start)) s"
  python3 bench/bench_nerfacc.py --device cuda --steps "${NERFACC_STEPS:-3000}" \
    --profile "${NERFACC_PROFILE:-20}" --out "$OUT" "$@" 2>&1 | tee "$OUT/nerfacc.log" | tail -n 40
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
# `scenes`: bench/bench_scenes.py (D3), one model decided on the mean over scenes:
#   bash bench/gpu.sh scenes [--scenes a,b] [--generate-only | --ours-only | --dvgo-only] ...
# ours (configs/nerf_realistic_gpu.toml) and, unless --ours-only, DirectVoxGO (DVGO_DIR,
# default .anchors/dvgo; `dvgo-build` first) on each scene of its SCENES: the realistic scene
# and scanned meshes from SCENE_MESHES (default .anchors/thin: CGAL's demo meshes, .off, as
# Debian's libcgal-demo ships them; carried along, never part of the repository). The scenes
# go to data/scenes, results accumulate in bench/results/scenes and DirectVoxGO's outputs in
# bench/results/scenes_dvgo (kept on a warm machine between calls: split scenes and systems
# over calls of under 10 minutes), copied to $OUT/scenes: scenes.md, scenes.json, the logs.
if [ "$what" = scenes ]; then
  keep=bench/results/scenes
  mkdir -p "$OUT/scenes" "$keep" bench/results/scenes_dvgo
  python3 bench/bench_scenes.py --meshes "${SCENE_MESHES:-.anchors/thin}" \
    --dvgo "${DVGO_DIR:-.anchors/dvgo}" --dvgo-log bench/results/scenes_dvgo --out "$keep" "$@" \
    2>&1 | tee -a "$keep/bench_scenes.log" | grep -v "^  " | tail -n 40
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  cp "$keep"/scenes.md "$keep"/scenes.json "$keep"/bench_scenes.log "$OUT/scenes/" 2>/dev/null
  cp bench/results/scenes_dvgo/*.log "$OUT/scenes/" 2>/dev/null
fi
# `scenes-pool`: bench/scenes_pool.py (every scene, DirectVoxGO and each --run, one job per
# GPU of the host) started detached, then waited for up to POOL_WAIT seconds (default 540);
# `scenes-wait` waits again, on the same warm machine, until it prints "pool exited" (exit 2 at
# once where this machine holds no pool).
#   bash bench/gpu.sh scenes-pool --run fast --run "quality: train.steps=60000" ...
# Each call copies the table so far (scenes.md, scenes.json), the pool's log and the jobs'
# logs (logs.tgz) to $OUT/scenes. With --gsplat, gsplat comes from GSPLAT_WHEELS (no download).
if [ "$what" = scenes-pool ] || [ "$what" = scenes-wait ]; then
  mkdir -p "$pool" "$OUT/scenes"
  if [ "$what" = scenes-pool ]; then
    [[ " $* " == *" --gsplat "* ]] && ! python3 -c "import gsplat" 2>/dev/null && python3 -m pip \
      install -q --no-index --find-links "${GSPLAT_WHEELS:-.anchors/gsplat_wheels}" gsplat 2>&1 | tail -n 3
    rm -f "$pool/pool.rc"
    args=$(printf '%q ' "$@")
    setsid nohup sh -c "python3 bench/scenes_pool.py --meshes ${SCENE_MESHES:-.anchors/thin} \
      --work $pool $args >$pool/pool.log 2>&1; echo \$? >$pool/pool.rc" </dev/null >/dev/null 2>&1 &
  fi
  end=$(($(date +%s) + ${POOL_WAIT:-540}))
  while [ ! -f "$pool/pool.rc" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
  grep "scenes_pool" "$pool/pool.log" | tail -n 25
  cp bench/results/scenes/scenes.md bench/results/scenes/scenes.json "$pool/pool.log" "$OUT/scenes/" 2>/dev/null
  tar czf "$OUT/scenes/logs.tgz" -C "$pool" logs 2>/dev/null
  cat bench/results/scenes/scenes.md 2>/dev/null
  if [ -f "$pool/pool.rc" ]; then
    echo "pool exited $(cat "$pool/pool.rc")"; status=$(cat "$pool/pool.rc")
  else
    echo "pool still running: call scenes-wait"; status=3
  fi
fi
exit $status
