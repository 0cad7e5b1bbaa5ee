"""Several GPUs: gradient averaging, one step piece by piece, 1 against n processes."""
