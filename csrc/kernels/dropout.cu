// The keep mask of node-feature dropout (core/dropout.h): one thread an element of the
// [rows, cols] mask, rows named by their global node ids.
#include "../core/dropout.h"
#include "api.h"
#include "device_launch.cuh"

namespace mgg::kernels {
namespace {

__global__ void node_keep_kernel(const int64_t* nodes, int64_t rows, int64_t col0, int64_t cols, uint64_t stream,
                                 float p, bool* out) {
  const int64_t total = rows * cols;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[k] = node_keep(stream, nodes[k / cols], col0 + k % cols, p);
  }
}

}  // namespace

cudaError_t launch_node_keep(const int64_t* nodes, int64_t rows, int64_t col0, int64_t cols, uint64_t stream, float p,
                             bool* out, cudaStream_t cuda_stream) {
  const int64_t total = rows * cols;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 65535);
  if (total == 0) return cudaSuccess;
  MGG_LAUNCH(dim3(static_cast<unsigned>(blocks)), dim3(threads), 0, cuda_stream, node_keep_kernel)
  (nodes, rows, col0, cols, stream, p, out);
  return cudaGetLastError();
}

}  // namespace mgg::kernels
