// Schemas of the mgg ops. A plan reaches the ops as two lists: `plan` holds the tensors of the
// forward step and then of its transposed step (fields: core/step_layout.h, mgg._C.STEP_FIELDS;
// absent tensors are None), `params` their integers (mgg._C.STEP_PARAMS, twice). The forward
// runs the first step; the backward (registered in mgg/ops.py) runs the second.
//
// aggregate:        remote rows come from one table (x_remote: a halo buffer, or empty).
// aggregate_peers:  remote rows come from each PE's own table (peers[pe], row remote_col), read
//                   through `fetch` (mgg._C.FETCH: direct loads, or NVSHMEM get at thread, warp
//                   or block scope on CUDA with symmetric tables).
// block_schedule:   the block schedule of a step from its row pointers (CPU, at plan time).
#include <torch/library.h>

TORCH_LIBRARY(mgg, m) {
  m.def("aggregate(Tensor x, Tensor x_remote, Tensor?[] plan, int[] params, bool deterministic) -> Tensor");
  m.def(
      "aggregate_peers(Tensor x, Tensor[] peers, int my_pe, Tensor?[] plan, int[] params, int fetch, "
      "bool deterministic) -> Tensor");
  m.def("block_schedule(Tensor local_rowptr, Tensor? remote_rowptr, int ps, int dist, int wpb) -> (Tensor, Tensor)");
}
