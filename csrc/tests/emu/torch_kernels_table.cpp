// kernels/table.cu for the emulated torch ops (torch_ops.cpp): the emulator's device side first,
// as the runner's build force-includes it.
#include <simt.h>

#include "../../kernels/table.cu"
