// The SIMT emulator's NVSHMEM extensions: warp- and block-scope gets, which every thread of the
// warp (block) calls with the same arguments (simt/nvshmem.cpp).
#pragma once
#include "nvshmem.h"

void nvshmemx_getmem_nbi_warp(void* dest, const void* source, size_t bytes, int pe,
                              const simt::Site& site = simt::Site::current());
void nvshmemx_getmem_nbi_block(void* dest, const void* source, size_t bytes, int pe,
                               const simt::Site& site = simt::Site::current());
