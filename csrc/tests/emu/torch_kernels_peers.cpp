// kernels/peers.cu for the emulated torch ops (torch_ops.cpp), through peers_kernels.cpp (its
// block-scope-get kernel's shared array); the emulator's device side first.
#include <simt.h>

#include "peers_kernels.cpp"
