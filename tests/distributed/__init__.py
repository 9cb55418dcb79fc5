"""mgg.distributed: ranks under torchrun (tests/workers/), the backends, NVSHMEM with threads as PEs,
the distributed tuner and embeddings."""
