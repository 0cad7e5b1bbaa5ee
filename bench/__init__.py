"""The project's benchmarks, by role (bench/README.md is the index). A package so that a
script imports its neighbours as `bench.ops.workloads`, `bench.harness`, ...; every script
that runs on its own puts the checkout first on sys.path, so `python bench/ops/bench_ops.py`
and `python -m bench.ops.bench_ops` from the repository root both work."""
