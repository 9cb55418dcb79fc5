"""The benchmark harness (bench/): every suite on a tiny graph, the reports, ptxas' resource reading (data/)."""
