// The kernels with both parts read from tables in this device's memory (mgg::aggregate: the
// rank's own rows and, for remote neighbors, a halo buffer; one rank has no remote part), and
// the max/min kernel (mgg::aggregate_extreme) reading the same tables.
#include "extreme_kernel.cuh"
#include "fetch.cuh"
#include "launch.cuh"

namespace mgg::kernels {
namespace {

// pick(tile): the range kernel of a pass over tables (range_kernel).
template <typename scalar_t>
auto table_kernel(const Step& s, const Sources& src) {
  const bool vec = vector_rows(s, Source::kTable, src);
  return [vec](int tile) { return range_kernel<scalar_t, TableFetch, TableFetch>(tile, vec); };
}

}  // namespace

std::string plan_table_launch(const Step& s, const Sources& src, Launch* l) {
  return with_storage(s.storage, [&](auto zero) {
    using scalar_t = decltype(zero);
    return plan_kernel_launch(s, table_kernel<scalar_t>(s, src), false, sizeof(scalar_t), l);
  });
}

cudaError_t launch_table(const Step& s, const Sources& src, const Launch& l, void* out, float* carry,
                         cudaStream_t stream) {
  return with_storage(s.storage, [&](auto zero) {
    using scalar_t = decltype(zero);
    return run_kernel<scalar_t>(s, l, table_kernel<scalar_t>(s, src)(l.tile), out, carry, stream,
                                TableFetch{src.local_table}, TableFetch{src.remote_table});
  });
}

std::string plan_extreme_launch(const Step& s, Launch* l) {
  return with_storage(s.storage, [&](auto zero) {
    using scalar_t = decltype(zero);
    return plan_extreme_kernel_launch(s, aggregate_extreme_kernel<scalar_t, TableFetch, TableFetch>, l);
  });
}

cudaError_t launch_extreme_table(const Step& s, const Sources& src, const Launch& l, bool is_max, int64_t remote_base,
                                 void* out, int64_t* arg, cudaStream_t stream) {
  return with_storage(s.storage, [&](auto zero) {
    using scalar_t = decltype(zero);
    if (l.blocks_x == 0) return cudaSuccess;
    const KernelArgs<scalar_t> a = kernel_args<scalar_t>(s, l, out, nullptr);
    MGG_LAUNCH(dim3(l.blocks_x, l.blocks_y), l.threads, l.smem, stream,
               aggregate_extreme_kernel<scalar_t, TableFetch, TableFetch>)(
        a, arg, remote_base, is_max, TableFetch{src.local_table}, TableFetch{src.remote_table});
    return cudaGetLastError();
  });
}

}  // namespace mgg::kernels
