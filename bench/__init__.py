"""mgg's microbenchmark harness: `python -m bench SUITE` (see bench/README.md)."""
