#!/usr/bin/env bash
# The release check, `bash bench/gpu.sh wheel` (no JIT build of the checkout; OUT set there).
# The sdist, then a wheel built from it with the installed torch (pip wheel
# --no-build-isolation --no-deps: CUDA kernels for TORCH_CUDA_ARCH_LIST), installed into a new
# venv (its own site-packages holds only the wheel; this python's site-packages, torch
# included, come after it through a .pth file: nothing is downloaded). From a folder outside
# the checkout it checks that `import grid` is the installed build with CUDA kernels, runs the
# op tests (a copy of tests/; WHEEL_TESTS picks the files, default those that need no
# checkout) and `grid-train --config default.toml` on the GPU. GRID_NO_CUDA=1 builds and
# checks a CPU wheel instead (the same steps on a machine without a GPU). Writes to $OUT:
# wheel.log (all output) and the sdist and wheel (dist/); the venv and the run directory stay
# in WHEEL_DIR (default /tmp/grid_wheel).
set -uo pipefail
cd "$(dirname "$0")/../.."
status=0

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
exit $status
