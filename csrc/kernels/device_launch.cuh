// The one way mgg's launchers start a kernel: MGG_LAUNCH(grid, block, smem, stream, kernel)(args...)
// is kernel<<<grid, block, smem, stream>>>(args...) under nvcc, and under the host compiler the
// launch of the SIMT emulator that runs the same kernel source on the CPU (csrc/tests/simt,
// test builds only; simt.h is force-included there).
#pragma once

#if defined(__CUDACC__)
#define MGG_LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<grid, block, smem, stream>>>
#else
#define MGG_LAUNCH(grid, block, smem, stream, ...) ::simt::launcher(__VA_ARGS__, grid, block, smem, stream)
#endif
