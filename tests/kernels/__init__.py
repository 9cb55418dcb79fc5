"""The CUDA kernels (csrc/kernels, csrc/ops/cuda): on a GPU, and on the CPU under the SIMT emulator
(simt/emulator.py, csrc/tests/simt and csrc/tests/emu)."""
