"""mgg's tests, one folder per subsystem (ARCHITECTURE.md). A package, so that test modules are named by their path
(tests.nn.test_nn) and their shared helpers import as `from tests.distributed.test_nvshmem_runtime import ...`; the
SIMT emulator they drive is the top-level package `simt` (also used by bench/)."""
