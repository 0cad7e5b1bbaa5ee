"""Kernel rows: the grid operators against PyTorch (bench_ops.py and its workloads)."""
