"""A command's fixed costs, phase by phase: what every run pays before its work.

    python bench/training/start_seconds.py [--repeat 5] [--json PATH]

Each phase is timed in fresh processes (the median of --repeat): the interpreter alone
(`python -c pass`, launch to exit); in one process, one import after another, `import
torch`, `import grid` after it (the native ops loaded), `torch._dynamo` after that (what the
first `torch.optim` optimizer imports: every training run pays it), `scipy.spatial` (the sdf
experiment's k-d tree); and whole commands from launch to exit: `python -m train --help`
and `python -m train keys`. The targets of issue 62: `import grid` <= 0.5 s after torch,
`--help` <= 0.5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: In one process, each import after the ones before it: (phase, module).
IMPORTS = [
    ("import torch", "torch"),
    ("import grid (after torch)", "grid"),
    ("torch._dynamo (the first optimizer's)", "torch._dynamo"),
    ("scipy.spatial (sdf k-d tree)", "scipy.spatial"),
]
#: Whole commands, launch to exit: (phase, arguments after the interpreter).
COMMANDS = [
    ("python -c pass", ["-c", "pass"]),
    ("python -m train --help", ["-m", "train", "--help"]),
    ("python -m train keys", ["-m", "train", "keys"]),
]
_TIMED_IMPORTS = """
import importlib, json, sys, time
seconds = []
for name in sys.argv[1:]:
    start = time.perf_counter()
    importlib.import_module(name)
    seconds.append(time.perf_counter() - start)
print(json.dumps(seconds))
"""


def import_seconds() -> list[float]:
    """Seconds of each of IMPORTS in one fresh process, in order."""
    names = [module for _, module in IMPORTS]
    done = subprocess.run(
        [sys.executable, "-c", _TIMED_IMPORTS, *names],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def command_seconds(args: list[str]) -> float:
    """Launch-to-exit seconds of `python ARGS` (its output discarded)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="fresh processes per phase")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    samples: dict[str, list[float]] = {phase: [] for phase, _ in IMPORTS + COMMANDS}
    for _ in range(args.repeat):  # interleaved: a busy spell spreads over every phase
        for (phase, _), seconds in zip(IMPORTS, import_seconds(), strict=True):
            samples[phase].append(seconds)
        for phase, command in COMMANDS:
            samples[phase].append(command_seconds(command))
    load = os.getloadavg()[0]
    print(
        f"start-up phases on {os.cpu_count()} CPUs (load average {load:.1f}), median of "
        f"{args.repeat} fresh processes\n"
    )
    print("| phase | median s | min s |\n| --- | --- | --- |")
    for phase, values in samples.items():
        print(f"| {phase} | {statistics.median(values):.3f} | {min(values):.3f} |")
    if args.json:
        rows = [{"phase": p, "seconds": v} for p, v in samples.items()]
        args.json.write_text(json.dumps({"load": load, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
