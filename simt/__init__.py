"""The SIMT emulator's Python side (its C++ is csrc/tests/simt/): `emulator` builds the runner and the
test-only torch extension and runs the CUDA kernels' own source on the CPU; `emulated_ops` writes real
mgg plans as the runner's cases. Used by tests/ and by bench/ (the counters, the remote-read counts);
part of the checkout, not of the installed package (it needs csrc/)."""
