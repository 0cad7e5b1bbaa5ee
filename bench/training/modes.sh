#!/usr/bin/env bash
# The training modes of bench/gpu.sh (which builds grid first, in place for sdf and view, and
# sets OUT): training as a user runs it, whole commands and steps.
#
#   bash bench/gpu.sh nerf [extra --set KEY=VALUE for both runs and N1...]
# configs/nerf_scene_gpu.toml (NERF_CONFIG) trained with both backends (NERF_BACKENDS; the
# scene is generated on the GPU first), and N1 (bench/training/bench_nerf.py, with the same
# --set; NERF_PROFILE=1 adds --profile) on the native run's final checkpoint. Writes to $OUT:
# nerf.log (all output), nerf_runs.json (both summaries and metrics), bench_nerf.json/.md and
# the native run's test_views.png, curves.png, turntable.gif. NERF_PROFILE=loop replaces N1
# by `bench_nerf.py --profile-loop` (device time by kernel of the loop's captured step), e.g.
# NERF_CONFIG=configs/nerf_realistic_gpu.toml NERF_BACKENDS=native NERF_PROFILE=loop.
#
#   bash bench/gpu.sh loop [extra --set KEY=VALUE...]
# configs/default.toml and configs/density_256.toml (LOOP_CONFIGS) trained with
# train.cuda_graph = auto (captured steps) and off (op by op): PSNR, points/s, steps/s and
# times from each summary, in $OUT/loop.log.
#
#   bash bench/gpu.sh sdf
# S2 (bench/training/sdf_seconds.py): the whole sdf command, points in, mesh out, as a user
# runs it: grid built in place first (no JIT load at start-up), then configs/sdf_scan_gpu.toml
# on each of SDF_POINTS (default .anchors/scans/*.npy, oriented points as
# bench/training/sdf_inputs.py makes them) at SDF_RESOLUTIONS (default 256,512), full and
# mesh-only. Writes $OUT/sdf.json, sdf.md; SDF_PROFILE=POINTS.npy adds $OUT/profile.txt
# (where a 256^3 mesh-only run's seconds go: imports, CUDA start, cProfile).
#
#   bash bench/gpu.sh view
# Grid built as for `sdf`; NERF_CONFIG (default configs/nerf_realistic_gpu.toml) trained, then
# bench/training/bench_viewer.py --render-only --size 512 on it ($OUT/view.log); with viser
# (installed from the wheels in VIEWER_WHEELS, default .anchors/wheels, when missing: no
# download) bench_viewer.py --client python --size 512 on the same run ($OUT/view_client.json)
# and the steps/s of NERF_CONFIG trained without and with --view ($OUT/view_cost/view_cost.md,
# .json; VIEW_COST_ARGS=--moving adds a moving camera).
# For sdf and view, TESTS="tests/test_x.py ..." runs those tests after the build.
#
#   bash bench/gpu.sh scenes [--scenes a,b] [--generate-only | --ours-only | --dvgo-only] ...
# bench/training/bench_scenes.py (D3), one model decided on the mean over scenes: ours
# (configs/nerf_realistic_gpu.toml) and, unless --ours-only, DirectVoxGO (DVGO_DIR, default
# .anchors/dvgo; `dvgo-build` first) on each scene of its SCENES: the realistic scene and
# scanned meshes from SCENE_MESHES (default .anchors/thin: CGAL's demo meshes, .off, as
# Debian's libcgal-demo ships them; carried along, never part of the repository). The scenes
# go to data/scenes, results accumulate in bench/results/scenes and DirectVoxGO's outputs in
# bench/results/scenes_dvgo (kept on a warm machine between calls: split scenes and systems
# over calls of under 10 minutes), copied to $OUT/scenes: scenes.md, scenes.json, the logs.
#
#   bash bench/gpu.sh scenes-pool --run fast --run "quality: train.steps=60000" ...
#   bash bench/gpu.sh scenes-wait
# bench/training/scenes_pool.py (every scene, DirectVoxGO and each --run, one job per GPU of
# the host) started detached, then waited for up to POOL_WAIT seconds (default 540);
# `scenes-wait` waits again, on the same warm machine, until it prints "pool exited" (exit 2
# at once where this machine holds no pool). Each call copies the table so far (scenes.md,
# scenes.json), the pool's log and the jobs' logs (logs.tgz) to $OUT/scenes. With --gsplat,
# gsplat comes from GSPLAT_WHEELS, and with --ngp (the instant-ngp anchor, tune-report too) nerfacc
# and rich from NERFACC_WHEELS (default .anchors/wheels): no download. `scenes-pool` refuses to
# start while another pool runs on the machine; `scenes-stop` stops it (the pool and every
# job of it, as one process group), keeping what finished: a later scenes-pool with the same
# --work skips those jobs and reruns the stopped one.
#   bash bench/gpu.sh tune-report --candidate "LABEL[@CONFIG]: K=V ..." ... [--report-run ...]
#   bash bench/gpu.sh tune-wait
# bench/training/tune_then_report.py started detached (the candidates on the tuning scenes
# while DirectVoxGO trains on the held-out ones, then the winner on the held-out ones; on one
# GPU the candidates first, then DirectVoxGO and the winner), after a
# smoke run of configs/nerf_multires.toml on the GPU (captured steps; the pipeline starts only
# if it passes), then waited for up to POOL_WAIT seconds; `tune-wait` waits again. Each call
# copies the pipeline's log, both tables so far (tables.md) and an archive of the rest
# (tune_report.tgz: JSON, choice, stdout, every run's log) to $OUT/tune_report.
set -uo pipefail
cd "$(dirname "$0")/../.."
what=$1
shift
status=0

if [ "$what" = sdf ] || [ "$what" = view ]; then
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
  python3 bench/training/bench_viewer.py "$run" --render-only --size 512 2>&1 | tee -a "$OUT/view.log"
  wheels=${VIEWER_WHEELS:-.anchors/wheels}
  if ! python3 -c "import viser" 2>/dev/null && [ -d "$wheels" ]; then  # no network: carried wheels
    python3 -m pip install -q --no-index --find-links "$wheels" viser 2>&1 \
      | tail -n 3 | tee -a "$OUT/view.log"
  fi
  if python3 -c "import viser" 2>/dev/null; then
    # the viewer with a browser-free client (bench/training/viser_client.py) on the trained run, timed
    # at the client and in the viewer's log; then the config trained without --view, with
    # --view alone, with --view and a client holding a still camera (VIEW_COST_ARGS=--moving
    # adds a client orbiting all the time: one more training run)
    python3 bench/training/bench_viewer.py "$run" --client python --size 512 --json "$OUT/view_client.json" \
      2>&1 | grep -v "[│╭╰]" | tee -a "$OUT/view.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    # shellcheck disable=SC2086  # VIEW_COST_ARGS is a word list
    python3 bench/training/bench_viewer.py --train-cost "${NERF_CONFIG:-configs/nerf_realistic_gpu.toml}" \
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
      python3 -c "import pstats; s = pstats.Stats('/tmp/sdf.prof').sort_stats('cumulative')
s.print_stats('(train|grid)/', 50); s.print_stats(40)"
    } >"$OUT/profile.txt" 2>&1
  fi
  # shellcheck disable=SC2086  # SDF_POINTS is a list of paths
  python3 bench/training/sdf_seconds.py ${SDF_POINTS:-.anchors/scans/*.npy} --config configs/sdf_scan_gpu.toml \
    --resolutions "${SDF_RESOLUTIONS:-256,512}" --json "$OUT/sdf.json" --md "$OUT/sdf.md" "$@" \
    2>&1 | tee "$OUT/sdf.log" | tail -n 30
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
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
    profile=()  # NERF_PROFILE=1: N1 with --profile; =loop: the loop's step alone, profiled
    case ${NERF_PROFILE:-} in "") ;; loop) profile=(--profile-loop) ;; *) profile=(--profile) ;; esac
    python3 bench/training/bench_nerf.py --config "$nerf_config" \
      --checkpoint "$runs/native/checkpoint.pt" --json "$OUT/bench_nerf.json" \
      "${profile[@]}" "$@" || status=1
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
if [ "$what" = scenes ]; then
  keep=bench/results/scenes
  mkdir -p "$OUT/scenes" "$keep" bench/results/scenes_dvgo
  python3 bench/training/bench_scenes.py --meshes "${SCENE_MESHES:-.anchors/thin}" \
    --dvgo "${DVGO_DIR:-.anchors/dvgo}" --dvgo-log bench/results/scenes_dvgo --out "$keep" "$@" \
    2>&1 | tee -a "$keep/bench_scenes.log" | grep -v "^  " | tail -n 40
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  cp "$keep"/scenes.md "$keep"/scenes.json "$keep"/bench_scenes.log "$OUT/scenes/" 2>/dev/null
  cp bench/results/scenes_dvgo/*.log "$OUT/scenes/" 2>/dev/null
fi
pool=bench/results/scenes_pool  # scenes-pool's work folder
# the running pool's process group (setsid: its jobs are in it too), else nothing
pool_running() { [ -f "$pool/pool.pid" ] && kill -0 -- "-$(cat "$pool/pool.pid")" 2>/dev/null; }
if [ "$what" = scenes-stop ]; then
  if ! pool_running; then
    echo "scenes-stop: no pool running on this machine"; exit 2
  fi
  kill -TERM -- "-$(cat "$pool/pool.pid")"
  for _ in $(seq 30); do pool_running || break; sleep 1; done
  pool_running && kill -KILL -- "-$(cat "$pool/pool.pid")"
  [ -f "$pool/pool.rc" ] || echo 143 >"$pool/pool.rc"  # SIGTERM's status: scenes-wait ends at once
  echo "scenes-stop: pool $(cat "$pool/pool.pid") stopped; finished jobs kept:"
  grep "exited 0" "$pool/pool.log" | tail -n 25
  exit 0
fi
if [ "$what" = scenes-pool ] || [ "$what" = scenes-wait ]; then
  mkdir -p "$pool" "$OUT/scenes"
  if [ "$what" = scenes-pool ]; then
    [[ " $* " == *" --gsplat "* ]] && ! python3 -c "import gsplat" 2>/dev/null && python3 -m pip \
      install -q --no-index --find-links "${GSPLAT_WHEELS:-.anchors/gsplat_wheels}" gsplat 2>&1 | tail -n 3
    # the instant-ngp anchor (--ngp DIR): nerfacc and rich from NERFACC_WHEELS, no download
    [[ " $* " == *" --ngp "* ]] && ! python3 -c "import nerfacc, rich" 2>/dev/null && python3 -m pip \
      install -q --no-index --find-links "${NERFACC_WHEELS:-.anchors/wheels}" nerfacc rich 2>&1 | tail -n 3
    rm -f "$pool/pool.rc"
    args=$(printf '%q ' "$@")
    setsid nohup sh -c "python3 bench/training/scenes_pool.py --meshes ${SCENE_MESHES:-.anchors/thin} \
      --work $pool $args >$pool/pool.log 2>&1; echo \$? >$pool/pool.rc" </dev/null >/dev/null 2>&1 &
    echo $! >"$pool/pool.pid"  # setsid ran in place (not a group leader): the group's id
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
tune=bench/results/tune_report  # tune-report's work folder
if [ "$what" = tune-report ]; then
  mkdir -p "$tune" "$OUT/tune_report"
  python3 -m train --config configs/nerf_multires.toml --out /tmp/smoke_multires --set device=cuda \
    --set train.cuda_graph=on --set output.pictures=false --set output.progress=false \
    >"$OUT/tune_report/smoke.log" 2>&1
  smoke=$?
  tail -n 4 "$OUT/tune_report/smoke.log"
  if [ "$smoke" -ne 0 ]; then
    echo "tune-report: the smoke run failed (exit $smoke): no pipeline started"; exit 1
  fi
  [[ " $* " == *" --ngp "* ]] && ! python3 -c "import nerfacc, rich" 2>/dev/null && python3 -m pip \
    install -q --no-index --find-links "${NERFACC_WHEELS:-.anchors/wheels}" nerfacc rich 2>&1 | tail -n 3
  rm -f "$tune/pipeline.rc"
  args=$(printf '%q ' "$@")
  setsid nohup sh -c "python3 bench/training/tune_then_report.py --meshes ${SCENE_MESHES:-.anchors/thin} \
    --dvgo ${DVGO_DIR:-.anchors/dvgo} --work $tune $args >$tune/stdout.log 2>&1; echo \$? >$tune/pipeline.rc" \
    </dev/null >/dev/null 2>&1 &
fi
if [ "$what" = tune-report ] || [ "$what" = tune-wait ]; then
  [ -d "$tune" ] || { echo "tune-wait: no pipeline on this machine ($tune absent)"; exit 2; }
  end=$(($(date +%s) + ${POOL_WAIT:-540}))
  while [ ! -f "$tune/pipeline.rc" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
  # Three files: some hosts bring back only a few files a call, so the tables stay apart
  # and the rest (JSON, choice, stdout, every run's log) travels as one archive.
  mkdir -p "$OUT/tune_report"
  cp "$tune"/pipeline.log "$OUT/tune_report/" 2>/dev/null
  { cat "$tune/tune/out/scenes.md"; echo; cat "$tune/report/out/scenes.md"; } \
    >"$OUT/tune_report/tables.md" 2>/dev/null
  (cd "$tune" && tar czf "$OUT/tune_report/tune_report.tgz" --ignore-failed-read \
    pipeline.log stdout.log choice.json tune/out/scenes.md tune/out/scenes.json tune/logs \
    report/out/scenes.md report/out/scenes.json report/logs 2>/dev/null)
  cat "$tune/pipeline.log" 2>/dev/null; cat "$tune/report/out/scenes.md" 2>/dev/null | tail -n 30
  if [ -f "$tune/pipeline.rc" ]; then
    echo "pipeline exited $(cat "$tune/pipeline.rc")"; status=$(cat "$tune/pipeline.rc")
  else
    echo "pipeline still running: call tune-wait"; status=3
  fi
fi
exit $status
