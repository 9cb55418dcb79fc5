// How the mgg ops receive a plan: a list of tensors and a list of integers per aggregation step,
// the forward step followed by its transposed step (which the backward runs). Written once here;
// mgg/plan.py builds the lists from mgg._C.STEP_FIELDS / STEP_PARAMS. Torch-free.
#pragma once

namespace mgg {

enum StepField : int {
  kLocalRowptr,   // int64 [rows + 1]
  kLocalCol,      // int32 [local edges]: row of the local table (x)
  kLocalWeight,   // float [local edges] or absent (weight 1)
  kRemoteRowptr,  // int64 [rows + 1], or absent: no remote part
  kRemoteCol,     // int32 [remote edges]: row of x_remote, or (aggregate_peers) offset in the owner's table
  kRemoteWeight,  // float [remote edges] or absent
  kRemotePe,      // int32 [remote edges]: owner PE (aggregate_peers), else absent
  kHaloPe,        // int32 [halo rows]: owner PE of each distinct remote source, in halo order (sorted)
  kHaloOffset,    // int32 [halo rows]: its row in the owner's table
  kRanges,        // int64 [warps + 1, kRangeFields]: the warp ranges (core/schedule.h)
  kFixups,        // int64 [split rows, kFixupFields]
  kStepFields
};
inline constexpr const char* kStepFieldNames[kStepFields] = {
    "local_rowptr", "local_col", "local_weight", "remote_rowptr", "remote_col", "remote_weight",
    "remote_pe",    "halo_pe",   "halo_offset",  "ranges",        "fixups"};

// num_slots: the carry rows the fixups read; landing_rows: the rows of a warp's landing chunk for
// remote rows fetched into shared memory (min(ps, remote edges), at least 1; 32 with ps = 0).
enum StepParam : int { kPs, kDist, kWpb, kInterleave, kNumSlots, kLandingRows, kStepParams };
inline constexpr const char* kStepParamNames[kStepParams] = {"ps",         "dist",      "wpb",
                                                             "interleave", "num_slots", "landing_rows"};

}  // namespace mgg
