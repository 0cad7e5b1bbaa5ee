"""One-question experiments: kernel bounds, counts and memory, beside the benchmark."""
