// kernels/attention.cu for the emulated torch ops (torch_attention.cpp): the emulator's device
// side first, as the runner's build force-includes it.
#include <simt.h>

#include "../../kernels/attention.cu"
