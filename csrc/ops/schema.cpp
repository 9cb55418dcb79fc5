// Schemas of the mgg ops. A plan reaches the ops as two lists: `plan` holds the tensors of the
// forward step and then of its transposed step (fields: core/step_layout.h, mgg._C.STEP_FIELDS;
// absent tensors are None), `params` their integers (mgg._C.STEP_PARAMS, twice). The forward
// runs the first step; the backward (registered in csrc/ops/autograd.cpp) runs the second.
//
// aggregate:        remote rows come from one table (x_remote: a halo buffer, or empty). Every
//                   aggregation is deterministic (bit-identical from run to run, the sums' order
//                   fixed by the plan); `deterministic` is accepted for the callers that pass it.
// aggregate_peers:  remote rows come from each PE's own table (peers[pe], row remote_col), read
//                   through `fetch` (mgg._C.FETCH: direct loads, or NVSHMEM get at thread, warp
//                   or block scope on CUDA with symmetric tables).
// aggregate_extreme: max or min (reduce) over each output row's sources, remote rows from one
//                   table as aggregate's; returns the output and, per element, the row of
//                   [x | x_remote] it came from (int64, -1 for a row without in-edges, whose
//                   output is 0). The rule (NaN and ties: the lowest index wins) is
//                   core/extreme.h's; the plan must be unweighted; only the forward step is read
//                   (the backward sends each gradient element to its arg, autograd.cpp).
// range_schedule:   the warp-range schedule of a step from its row pointers (CPU, at plan time):
//                   (ranges, fixups), core/schedule.h.
// attend:           GAT's attention over a step (core/attention.h): x holds the rank's source
//                   rows (per head its features then its source term), x_remote the halo rows
//                   likewise, a_dst the output rows' destination terms; ids (optional) the global
//                   ids of [x | x_remote]'s rows and row_offset the id of output row 0, which the
//                   dropout draw uses. Returns the output rows and each row's softmax statistics
//                   (max, sum per head). attend_backward: its adjoint, registered as attend's
//                   autograd in autograd.cpp.
// attend_peers:     the same with sources named by owner PE (peers[pe], as aggregate_peers), the
//                   global ids being offsets[pe] + row; no autograd of its own: the nvshmem
//                   backend composes its backward from attention_terms (the output rows' terms,
//                   published to peers), attend_peers_dst (pass A: d a_dst) and attend_peers_src
//                   (pass B over the transposed graph's step: the source rows' gradients).
// attention_keep:   the dropout factors those ops draw for given edges (global ids) and heads.
// node_keep:        node-feature dropout's keep mask (core/dropout.h): [len(nodes), col1 - col0] bool
//                   for rows of global node ids `nodes`, drawn alike by any rank count or grid.
#include <torch/library.h>

TORCH_LIBRARY(mgg, m) {
  m.def("aggregate(Tensor x, Tensor x_remote, Tensor?[] plan, int[] params, bool deterministic) -> Tensor");
  m.def(
      "aggregate_peers(Tensor x, Tensor[] peers, int my_pe, Tensor?[] plan, int[] params, int fetch, "
      "bool deterministic) -> Tensor");
  m.def(
      "aggregate_extreme(Tensor x, Tensor x_remote, Tensor?[] plan, int[] params, str reduce) -> (Tensor, "
      "Tensor)");
  m.def("range_schedule(Tensor local_rowptr, Tensor? remote_rowptr, int ps, int dist) -> (Tensor, Tensor)");
  m.def(
      "attend(Tensor x, Tensor x_remote, Tensor a_dst, Tensor?[] plan, int[] params, int heads, float negative_slope, "
      "float dropout, int seed, Tensor? ids, int row_offset) -> (Tensor, Tensor)");
  m.def(
      "attend_backward(Tensor grad, Tensor x, Tensor x_remote, Tensor a_dst, Tensor out, Tensor stats, Tensor?[] plan, "
      "int[] params, int heads, float negative_slope, float dropout, int seed, Tensor? ids, int row_offset) -> "
      "(Tensor, Tensor, Tensor)");
  m.def(
      "attend_peers(Tensor[] peers, int my_pe, Tensor a_dst, Tensor?[] plan, int[] params, int heads, "
      "float negative_slope, float dropout, int seed, int[] offsets, int fetch) -> (Tensor, Tensor)");
  m.def("attention_terms(Tensor grad, Tensor out, Tensor a_dst, Tensor stats, int heads) -> Tensor");
  m.def("attention_keep(Tensor dst, Tensor src, int heads, int seed, float p) -> Tensor");
  m.def("node_keep(Tensor nodes, int col0, int col1, int seed, int step, int layer, float p) -> Tensor");
  m.def(
      "attend_peers_dst(Tensor[] peers, int my_pe, Tensor terms, Tensor?[] plan, int[] params, int heads, "
      "float negative_slope, float dropout, int seed, int[] offsets, int fetch) -> Tensor");
  m.def(
      "attend_peers_src(Tensor x, Tensor[] terms, int my_pe, Tensor?[] plan, int[] params, int heads, "
      "float negative_slope, float dropout, int seed, int[] offsets, int fetch) -> Tensor");
}
