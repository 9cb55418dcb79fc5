// The torch-free entry points of mgg's CUDA kernels (in the manner of DeepEP's api.cuh): raw
// device pointers, a stream and cudaError_t. The op files (ops/cuda/) own ATen: they check
// arguments and the plan, allocate the output, and call these.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "../core/attention.h"
#include "../core/limits.h"

namespace mgg::kernels {

enum class Storage : int { kFloat32, kFloat16, kBFloat16 };

inline size_t storage_bytes(Storage s) { return s == Storage::kFloat32 ? 4 : 2; }

// One part of a step on the device (core/executor.h's PlanPart with fp32 weights).
struct DevicePart {
  const int64_t* rowptr;  // [rows + 1]; nullptr: the part is empty
  const int32_t* col;     // [edges]
  const float* weight;    // [edges] or nullptr (weight 1)
  const int32_t* pe;      // [edges] owner PE (peer sources) or nullptr
};

// One aggregation step: its parts, its warp-range schedule (core/schedule.h) and its launch
// parameters.
struct Step {
  Storage storage;
  DevicePart local, remote;
  const int64_t* ranges;  // [num_warps + 1, kRangeFields]
  int64_t num_warps;
  const int64_t* fixups;  // [num_fixups, kFixupFields]
  int64_t num_fixups;
  int64_t num_rows, dim, ps, dist, wpb;
  int64_t landing_rows;  // rows of a landing chunk (core/launch_shape.h's landing_rows_for)
  bool interleave;
};

// Where source rows are read.
enum class Source : int {
  kTable,         // local rows from this rank's table, remote rows from one table (a halo buffer)
  kPeerPointers,  // remote rows from each PE's table through pointers this device loads from
  kGetThread,     // remote rows by NVSHMEM get into shared memory: one lane per row
  kGetWarp,       //   the warp per row (MGG's path)
  kGetBlock,      //   the get-block policy: fetched at warp scope (the range kernel's warps share no barrier)
};

struct Sources {
  const void* local_table;     // this rank's rows [*, dim]
  const void* remote_table;    // kTable: the halo rows [*, dim]
  const void* peers[kMaxPes];  // kPeerPointers, and gets with p2p: each PE's table as this device addresses it
  const void* symmetric;       // gets: this PE's table, whose address names every PE's copy
  bool p2p;                    // gets: every PE is reachable by loads (peers: nvshmem_ptr of symmetric), so rows are
                               // copied from peers[pe] (kernels/fetch.cuh's PeerCopyFetch) instead of NVSHMEM gets
};

struct Launch {
  unsigned blocks_x, blocks_y;
  int threads, tile, landing_rows;
  size_t smem;
};

// The launch of `step` reading from `source` on the current device. The message is empty when
// it can launch and otherwise says in one line why not (threads or shared memory over what the
// compiled kernel and the device allow). table.cu serves Source::kTable, peers.cu the others
// (whose kernel depends on the sources: their p2p).
std::string plan_table_launch(const Step& step, const Sources& sources, Launch* launch);
std::string plan_peers_launch(const Step& step, Source source, const Sources& sources, Launch* launch);

// Runs the step (and the fixups of rows cut by warp boundaries) on `stream`, writing every output
// row once: out [num_rows, dim] in the storage type, carry [num_slots, dim] in fp32.
cudaError_t launch_table(const Step& step, const Sources& sources, const Launch& launch, void* out, float* carry,
                         cudaStream_t stream);
cudaError_t launch_peers(const Step& step, Source source, const Sources& sources, const Launch& launch, void* out,
                         float* carry, cudaStream_t stream);

// Max/min aggregation (core/extreme.h, kernels/extreme_kernel.cuh) from tables (Source::kTable):
// one warp per row, wpb rows to a block; is_max picks max, else min.
// Writes out [num_rows, dim] in the storage type and arg [num_rows, dim] (rows of
// [local | remote table], remote rows from remote_base on; kNoArg for a row without edges).
std::string plan_extreme_launch(const Step& step, Launch* launch);
cudaError_t launch_extreme_table(const Step& step, const Sources& sources, const Launch& launch, bool is_max,
                                 int64_t remote_base, void* out, int64_t* arg, cudaStream_t stream);

// GAT's attention (core/attention.h, kernels/attention.cu): one step of the call, its shape,
// and the global ids its dropout draws with. Sources are read as aggregate's are (Source and
// Sources: remote rows from one table, peer pointers or NVSHMEM gets); terms tables are fp32.
struct Attention {
  Storage storage;
  DevicePart local, remote;
  int64_t rows, heads, channels, wpb;
  float slope, dropout;
  uint64_t seed;
  NodeIds ids;
};

enum class AttentionPass : int {
  kForward,  // sources: source rows (storage type); writes out and stats
  kDst,      // sources: source rows; reads the output rows' terms, writes d a_dst
  kSrc,      // sources: the output rows' terms (fp32); reads the step's own rows, writes their gradient
};

// The planned kernel is the one the sources run (their p2p), as for plan_peers_launch.
std::string plan_attention_launch(const Attention& a, AttentionPass pass, Source source, const Sources& sources,
                                  Launch* launch);
cudaError_t launch_attend(const Attention& a, Source source, const Sources& src, const Launch& l, const void* a_dst,
                          void* out, float* stats, cudaStream_t stream);
cudaError_t launch_attend_dst(const Attention& a, Source source, const Sources& src, const Launch& l,
                              const float* terms, void* d_dst, cudaStream_t stream);
cudaError_t launch_attend_src(const Attention& a, Source source, const Sources& src, const Launch& l, const void* own,
                              void* grad, cudaStream_t stream);

// Node-feature dropout's keep mask (core/dropout.h) of `rows` rows (global ids `nodes`) and columns
// [col0, col0 + cols): out[rows, cols].
cudaError_t launch_node_keep(const int64_t* nodes, int64_t rows, int64_t col0, int64_t cols, uint64_t stream, float p,
                             bool* out, cudaStream_t cuda_stream);

}  // namespace mgg::kernels
