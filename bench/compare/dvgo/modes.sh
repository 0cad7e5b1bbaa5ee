#!/usr/bin/env bash
# The DirectVoxGO modes of bench/gpu.sh (which builds grid first and sets OUT). Run DirectVoxGO
# only through them: its TORCH_EXTENSIONS_DIR and TORCH_CUDA_ARCH_LIST are what dvgo-build
# compiled with, and other values recompile its extensions (minutes). Its code is DVGO_DIR
# (default .anchors/dvgo: a copy of the anchor folder, carried along, never part of the
# repository).
#
#   bash bench/gpu.sh dvgo-build
# Only JIT-builds DirectVoxGO's CUDA extensions, so that a later `dvgo --dvgo-only` call on the
# same warm machine spends its 10 minutes on training. $OUT/dvgo_build.log.
#
#   bash bench/gpu.sh dvgo [extra bench_dvgo.py arguments, e.g. --ours-steps N --set K=V...,
#       --capture PATH: a capture of one's own instead of the realistic scene]
# bench/compare/dvgo/bench_dvgo.py: the realistic scene (configs/nerf_realistic_gpu.toml,
# 400x400, generated on the GPU), DirectVoxGO trained and tested on it, then ours for as long,
# evaluated at 1/3, 2/3 and all of DirectVoxGO's training time. Writes to $OUT/dvgo: dvgo.md
# (the table: PSNR, SSIM against training seconds, peak memory), dvgo.json, dvgo.log
# (DirectVoxGO's output), ours/ (the run directory). Measured on an H100: ours builds in
# ~65 s, the scene generates in ~65 s, DirectVoxGO's extensions compile in ~290 s and its run
# takes 300-450 s with its test renders: more than one 10-minute call. So, on one warm
# machine, call after call: `bash bench/gpu.sh dvgo-build`, `bash bench/gpu.sh dvgo
# --dvgo-only`, then `bash bench/gpu.sh dvgo --dvgo-log bench/results/dvgo_work/dvgo.log
# --ours-steps N` (N: DirectVoxGO's training seconds x ~160 steps/s, with margin; ours stops
# being evaluated by time at T and runs on to N). DirectVoxGO on our grid
# (bench/compare/dvgo/dvgo_grid.py), beside its own run: `bash bench/gpu.sh dvgo --dvgo-only
# --work /tmp/own`, then `bash bench/gpu.sh dvgo --grid ours --dvgo-only --against
# /tmp/own/dvgo.log` ($OUT/dvgo/dvgo_grid.md).
#
#   bash bench/gpu.sh dvgo --scene unbounded|forward|unbounded_v1|unbounded_v2|forward_v1|forward_v2
#       [extra dvgo_unbounded.py arguments...]
# bench/compare/dvgo/dvgo_unbounded.py: the unbounded scene (configs/nerf_unbounded_gpu.toml:
# 400x400, 175 training and 25 test views), written in LLFF's layout (dvgo_llff.py: the views
# interleaved so that llffhold = 8 holds out exactly the test views), DirectVoxGO v2's own
# unbounded setting on it (no coarse stage, 40000 iterations of 4096 rays, a contracted 320^3
# grid, its distortion loss from dvgo_v2_shims.py), then ours for as long, evaluated at T/2
# and T. `forward`: --setting llff, DirectVoxGO's NDC setting, on
# configs/nerf_forward_gpu.toml's scene. The `_v1`, `_v2` scenes are the held-out variants
# (data.scene_variant: other buildings, sun, ground and paint), their work folders
# bench/results/dvgo_<scene>_work. Writes to $OUT/dvgo: dvgo_unbounded.md / .json,
# dvgo.log, ours/. Its work folder (the LLFF copy, DirectVoxGO's logs and renders) is
# bench/results/dvgo_unbounded_work. DirectVoxGO v2 runs longer than one 10-minute call, so it
# runs detached and later calls wait for it, on one warm machine: `bash bench/gpu.sh
# dvgo-build`; `bash bench/gpu.sh dvgo --scene unbounded --dvgo-only --detach` (returns at
# once; the detached run generates the scene, ~1-2 min, writes the LLFF copy, then trains and
# tests DirectVoxGO); `bash bench/gpu.sh dvgo --scene unbounded --wait 560`, again until it
# prints "the detached run exited 0" (before: "still running" and DirectVoxGO's last lines;
# the last call copies dvgo_unbounded.json, dvgo.log and dvgo_test_000.png into $OUT/dvgo);
# then ours: `bash bench/gpu.sh dvgo --scene unbounded --dvgo-log
# bench/results/dvgo_unbounded_work/dvgo.log --ours-steps N` (N: DirectVoxGO's training
# seconds x ours' steps/s, with margin), itself with --detach and then --wait calls when
# DirectVoxGO trained more than ~8 minutes. A quick check of the whole chain first: add
# `--dvgo-iters 2000` (and `--ours-steps 2000`).
set -uo pipefail
cd "$(dirname "$0")/../../.."
what=$1
shift
status=0
dvgo=${DVGO_DIR:-.anchors/dvgo}

if [ "$what" = dvgo ]; then
  mkdir -p "$OUT/dvgo"
  script=bench/compare/dvgo/bench_dvgo.py
  if [ "${1:-}" = --scene ]; then  # the bounded scene is bench_dvgo.py's own
    case "${2:-}" in  # dvgo_unbounded.py's SCENES: its config and setting come with it
      unbounded) set -- --scene unbounded "${@:3}" ;;
      forward) set -- --scene forward --work bench/results/dvgo_forward_work "${@:3}" ;;
      unbounded_v[1-9] | forward_v[1-9])
        set -- --scene "$2" --work "bench/results/dvgo_${2}_work" "${@:3}" ;;
      *) echo "dvgo: --scene takes unbounded, forward (tuning) or unbounded_v1, unbounded_v2," \
        "forward_v1, forward_v2 (held out), got '${2:-}'"; exit 2 ;;
    esac
    script=bench/compare/dvgo/dvgo_unbounded.py
  fi
  python3 "$script" --dvgo "$dvgo" --out "$OUT/dvgo" "$@" 2>&1 \
    | tee "$OUT/dvgo/$(basename "$script" .py).log" | grep -v "^  " | tail -n 40
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
if [ "$what" = dvgo-build ]; then
  start=$(date +%s)
  (cd "$dvgo" && python3 -c "import sys; sys.path[:0] = ['shim', '.']
from lib import utils, dvgo, dcvgo, dmpigo") >"$OUT/dvgo_build.log" 2>&1 || status=1
  tail -n 5 "$OUT/dvgo_build.log"
  echo "DirectVoxGO build: $(($(date +%s) - start)) s"
fi
exit $status
