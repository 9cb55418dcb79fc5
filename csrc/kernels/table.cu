// The kernels with both parts read from tables in this device's memory (mgg::aggregate: the
// rank's own rows and, for remote neighbors, a halo buffer; one rank has no remote part), and
// the max/min kernel (mgg::aggregate_extreme) reading the same tables.
#include "extreme_kernel.cuh"
#include "fetch.cuh"
#include "launch.cuh"

namespace mgg::kernels {
namespace {

template <typename scalar_t>
auto table_kernel(bool deterministic) {
  return deterministic ? aggregate_rows_kernel<scalar_t, TableFetch, TableFetch>
                       : aggregate_blocks_kernel<scalar_t, TableFetch, TableFetch>;
}

}  // namespace

std::string plan_table_launch(const Step& s, Launch* l) {
  return with_storage(s.storage, [&](auto zero) {
    using scalar_t = decltype(zero);
    return plan_kernel_launch<scalar_t>(s, table_kernel<scalar_t>(s.deterministic), false, l);
  });
}

cudaError_t launch_table(const Step& s, const Sources& src, const Launch& l, void* out, float* scratch,
                         cudaStream_t stream) {
  return with_storage(s.storage, [&](auto zero) {
    using scalar_t = decltype(zero);
    return run_kernel<scalar_t>(s, l, vector_rows(s, Source::kTable, src), table_kernel<scalar_t>(s.deterministic), out,
                                scratch, stream, TableFetch{src.local_table}, TableFetch{src.remote_table});
  });
}

std::string plan_extreme_launch(const Step& s, Launch* l) {
  return with_storage(s.storage, [&](auto zero) {
    using scalar_t = decltype(zero);
    return plan_kernel_launch<scalar_t>(s, aggregate_extreme_kernel<scalar_t, TableFetch, TableFetch>, false, l);
  });
}

cudaError_t launch_extreme_table(const Step& s, const Sources& src, const Launch& l, bool is_max, int64_t remote_base,
                                 void* out, int64_t* arg, cudaStream_t stream) {
  return with_storage(s.storage, [&](auto zero) {
    using scalar_t = decltype(zero);
    if (l.blocks_x == 0) return cudaSuccess;
    const KernelArgs<scalar_t> a = kernel_args<scalar_t>(s, l, false, out, nullptr);  // scalar loads
    MGG_LAUNCH(dim3(l.blocks_x, l.blocks_y), l.threads, l.smem, stream,
               aggregate_extreme_kernel<scalar_t, TableFetch, TableFetch>)(
        a, arg, remote_base, is_max, TableFetch{src.local_table}, TableFetch{src.remote_table});
    return cudaGetLastError();
  });
}

}  // namespace mgg::kernels
