// The kernels with both parts read from tables in this device's memory (mgg::aggregate: the
// rank's own rows and, for remote neighbors, a halo buffer; one rank has no remote part).
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
    return run_kernel<scalar_t>(s, l, table_kernel<scalar_t>(s.deterministic), out, scratch, stream,
                                TableFetch{src.local_table}, TableFetch{src.remote_table});
  });
}

}  // namespace mgg::kernels
