// The CUDA kernels of the mgg aggregation ops, templated on where source rows come from
// (fetch.cuh). Device code only: no ATen; the launcher is kernels/launch.cuh and the schedule
// layout and its walk are core/schedule.h, which the CPU executor walks the same way.
//
// aggregate_blocks_kernel (the default, MGG §5.2 / Fig. 6b): thread block b takes schedule
// block b. Its warps take (local, remote) neighbor-partition pairs at interleave distance dist:
// each starts the fetch of its remote partition, aggregates its local partition while the fetch
// is in flight, completes the fetch and aggregates the arrived rows. Lanes own feature columns
// of a grid.y slice of `tile` columns (at most kVecBytes of a row per lane: 4 fp32 or 8
// fp16/bf16 columns), as LaneCols says: a run of consecutive columns read with one 16-byte
// vector load where every row the launch reads is 16-byte aligned, otherwise columns 32 apart,
// one coalesced load each. With vector loads, a slice of at most 16 runs is read by lane
// groups, each taking its own edge, so one warp instruction serves several edges. A warp sums consecutive partitions of
// one row (local and remote alike) in one set of registers and adds them (each lane group its own sums) into the
// block's partial sum of that row in dynamic shared memory (2 * wpb rows x tile floats: MGG
// eq. 1, plus the warps' landing buffers for fetched remote rows) with shared atomics when it moves
// to another row, each lane visiting its run of columns in a rotated order so that the warp's
// adds hit distinct banks (commit: 1 wavefront per add, 2 at D = 16). The walk over the
// schedule uses 32-bit indices (KernelWalk; the op checks a step fits, core/limits.h's
// kMaxKernelIndex). Registers: at most 64 per thread on sm_90 (kBlockRegisters), which CI's
// resource check holds without spills (bench/resources.py).
// After a block barrier each row of the block is written once, to the output or, for a row cut
// across blocks, to its scratch slot; aggregate_fixup_kernel then sums a row's slots in order.
// No output element is read before it is written and no global atomics are used.
//
// aggregate_blocks_blockget_kernel (peers.cu): the same with block-scope asynchronous copies
// within a node. aggregate_blocks_fetchwarp_kernel (peers.cu): the proxy path's, where one more
// warp posts the NVSHMEM gets of every warp's remote rows while they aggregate local ones.
// aggregate_rows_kernel (deterministic mode): one warp per output row sums its edges in plan
// order (lane groups: each group its share, in a fixed order) and writes the row; results are
// bit-identical from run to run.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../core/schedule.h"
#include "api.h"
#include "memory.cuh"
#include "registers.cuh"

namespace mgg::kernels {

constexpr unsigned kFull = 0xffffffffu;
// A step walked with 32-bit indices (kMaxKernelIndex): the walk state is most of the blocks
// kernels' registers.
using KernelPartition = BasicPartition<int32_t>;
using KernelWalk = BasicPartWalk<int32_t>;
constexpr int kMaxThreads = static_cast<int>(kWpbMax) * kWarp;  // the widest block a config asks for
// The blocks kernels' launch bounds: kMaxThreads and this many blocks of them per SM, so ptxas
// keeps each thread within kBlockRegisters = 65536 / (kBlocksPerSm * kMaxThreads) registers: 64
// on sm_90 (H100/H200), which every blocks kernel fits without spilling, whatever its source
// (the proxy path's kernel, whose block has a fetch warp beside the schedule's, states the same
// bound with __maxnreg__). sm_80's code for the same sources needs up to 128, so there 1 block
// (128 registers, no spill). bench/resources.py lists every kernel's registers and spills; CI
// fails on any spill, and on a blocks kernel over 64 registers on sm_90.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr int kBlocksPerSm = 1;
#else
constexpr int kBlocksPerSm = 2;
#endif
constexpr int kBlockRegisters = 65536 / (kBlocksPerSm * kMaxThreads);

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// The kVecBytes / sizeof(scalar_t) values of one 16-byte load as floats (fp16/bf16: a pair
// per 32-bit word, converted together).
template <typename scalar_t, int N>
__device__ __forceinline__ void unpack(const uint4& raw, float (&v)[N]) {
  static_assert(N * sizeof(scalar_t) == sizeof(uint4), "one value per element of the load");
  const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (sizeof(scalar_t) == 4) {
      memcpy(&v[i], &words[i], sizeof(float));
    } else {
      using Pair = typename std::conditional<std::is_same<scalar_t, __half>::value, __half2, __nv_bfloat162>::type;
      Pair pair;
      memcpy(static_cast<void*>(&pair), &words[i], sizeof(pair));
      float2 f;
      if constexpr (std::is_same<scalar_t, __half>::value) {
        f = __half22float2(pair);
      } else {
        f = __bfloat1622float2(pair);
      }
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  }
}

// The step as the kernels read it: the api's Step with the launch's tile and landing rows.
template <typename scalar_t>
struct KernelArgs {
  DevicePart local, remote;
  const int64_t* __restrict__ blocks;
  const int64_t* __restrict__ fixups;
  int64_t num_rows, ps, dist, dim;
  int tile;          // multiple of 32, <= kMaxTile
  int landing_rows;  // rows of a warp's landing buffer (<= kChunk)
  bool interleave;
  bool vec;  // every row read starts on a kVecBytes boundary: 16-byte loads (launch.cuh's vector_rows)
  scalar_t* __restrict__ out;
  float* __restrict__ scratch;  // [num_slots, dim]
};

template <int N>
__device__ __forceinline__ void zero(float (&acc)[N]) {
#pragma unroll
  for (int j = 0; j < N; ++j) acc[j] = 0.f;
}

// The columns [0, width) of a tile slice a lane owns: its acc[j] (j < kVec) is column col(j),
// the one place the summing kernels map a lane's registers to columns (loads, shared partial
// sums, the output). A slice has at most kWarp * kVec columns (core/launch_shape.h's
// max_tile_columns: kVecBytes of a row per lane, 4 fp32 or 8 fp16/bf16 columns). With vec
// (every row of the launch on a kVecBytes boundary, launch.cuh's vector_rows, so width and the
// slice's first column are multiples of kVec) a lane owns a run of kVec consecutive columns,
// the runs of the lanes side by side: acc[j] is column slot kVec + j, read in one 16-byte load.
// Otherwise lane `lane` owns columns lane + 32 j, so each of its kVec loads is coalesced across
// the warp. (aggregate_extreme_kernel maps column lane + 32 j for kMaxPerLane columns,
// extreme_kernel.cuh.)
//
// Lane groups (vec, a slice of at most 16 runs: D <= 64 fp32, D <= 128 fp16/bf16): a group of
// `group` lanes (the runs of the slice, rounded up to a power of two) reads one row, so one warp
// instruction reads the rows of kWarp / group edges: lane `lane` is lane `slot` of group `sub`
// and takes edge i + sub of each step of kWarp / group edges. Each group sums its own edges:
// commit adds every group's sums into the block's partial sums, and before the rows kernel
// writes a row, gather() adds them into group 0's lanes, which alone write. Without groups,
// group = kWarp: slot = lane, sub = 0.
template <typename scalar_t>
struct LaneCols {
  static constexpr int kVec = kVecBytes / static_cast<int>(sizeof(scalar_t));
  static_assert(kWarp * kVec <= kMaxTile, "a slice is at most kMaxTile columns");
  using Acc = float[kVec];  // a lane's sums: acc[j] is column col(j)
  int lane, width;
  bool vec;
  int shift;  // log2 of group
  __device__ __forceinline__ LaneCols(int lane_, int width_, bool vec_)
      : lane(lane_), width(width_), vec(vec_), shift(5) {
    const int n = (width + kVec - 1) / kVec;  // runs of the slice
    if (vec && n <= kWarp / 2) {
      shift = 0;
      while ((1 << shift) < n) ++shift;
    }
  }
  __device__ __forceinline__ int group() const { return 1 << shift; }
  __device__ __forceinline__ int slot() const { return lane & (group() - 1); }
  __device__ __forceinline__ int sub() const { return lane >> shift; }
  __device__ __forceinline__ int edges() const { return kWarp >> shift; }  // edges per instruction
  // Computed where it is used: the lane is passed through opaque(), so the compiler cannot hoist
  // the kVec columns of every call site out of the kernel's loops and hold them for its whole
  // run (up to 15 registers at fp16/bf16, spilled at the 64-register bound).
  __device__ __forceinline__ int col(int j) const {
    const int l = opaque(lane);
    return vec ? (l & (group() - 1)) * kVec + j : j * kWarp + l;
  }
};

// Adds every lane group's sums into group 0's lanes (LaneCols), whose sums are then the warp's.
template <typename scalar_t>
__device__ __forceinline__ void gather(typename LaneCols<scalar_t>::Acc& acc, const LaneCols<scalar_t>& c) {
  for (int off = kWarp / 2; off >= c.group(); off /= 2) {  // uniform across the warp
#pragma unroll
    for (int k = 0; k < LaneCols<scalar_t>::kVec; ++k) acc[k] += __shfl_down_sync(kFull, acc[k], off);
  }
}

// acc += w * columns [0, width) of row src as `c` maps them: kVecLoads (c.vec: the callers
// branch once per chunk of edges) one 16-byte load of the lane's run (with vec, width is a
// multiple of kVec, so a run the lane has lies inside the slice); otherwise one load per column.
// `has`: the lane has a row (false for a lane group past the chunk's last edge).
template <bool kVecLoads, typename scalar_t>
__device__ __forceinline__ void add_row(typename LaneCols<scalar_t>::Acc& acc, const scalar_t* __restrict__ src,
                                        float w, const LaneCols<scalar_t>& c, bool has = true) {
  constexpr int kVec = LaneCols<scalar_t>::kVec;
  if constexpr (kVecLoads) {
    const int d = c.col(0);
    const uint4* p = reinterpret_cast<const uint4*>(src + d);
    MGG_GLOBAL_LOAD(p, has && d < c.width);
    if (has && d < c.width) {
      float v[kVec];
      unpack<scalar_t>(*p, v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc[k] += w * v[k];
    }
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int d = c.col(k);
      MGG_GLOBAL_LOAD(src + d, d < c.width);
      if (d < c.width) acc[k] += w * to_float(src[d]);
    }
  }
}

// Lane i holds edge c + i of a chunk of n edges.
struct LaneEdge {
  int32_t col = 0, pe = 0;
  float w = 1.f;
};

__device__ __forceinline__ LaneEdge load_edge(const DevicePart& p, int32_t c, int n, int lane) {
  LaneEdge e;
  MGG_GLOBAL_LOAD(p.col + c + lane, lane < n);
  if (p.pe) MGG_GLOBAL_LOAD(p.pe + c + lane, lane < n);
  if (p.weight) MGG_GLOBAL_LOAD(p.weight + c + lane, lane < n);
  if (lane < n) {
    e.col = p.col[c + lane];
    if (p.pe) e.pe = p.pe[c + lane];
    if (p.weight) e.w = p.weight[c + lane];
  }
  return e;
}

// The weight of edge i of a chunk (lane i holds it): one shuffle, none for an unweighted part
// (`weighted` is uniform across the warp).
__device__ __forceinline__ float edge_weight(const LaneEdge& mine, int i, bool weighted) {
  return weighted ? __shfl_sync(kFull, mine.w, i) : 1.f;
}

// acc += the rows of the n edges of a chunk that `mine` holds, read in place, kUnroll steps at a
// time (the loads of several rows in flight); a step is one edge per lane group (LaneCols). An
// edge costs one shuffle for its column, one for its PE where the source reads it (Src::kReadsPe)
// and one for its weight in a weighted part.
template <bool kVecLoads, int kUnroll, typename scalar_t, typename Src>
__device__ __forceinline__ void add_chunk(typename LaneCols<scalar_t>::Acc& acc, const LaneEdge& mine, int n,
                                          bool weighted, const Src& src, int64_t dim, int64_t d0,
                                          const LaneCols<scalar_t>& cols) {
  const int step = kVecLoads ? cols.edges() : 1;
#pragma unroll kUnroll
  for (int i0 = 0; i0 < n; i0 += step) {
    const int i = i0 + (kVecLoads ? cols.sub() : 0);  // < kWarp: i0 is a multiple of step below n <= kWarp
    const int32_t col = __shfl_sync(kFull, mine.col, i);
    const int32_t pe = Src::kReadsPe ? __shfl_sync(kFull, mine.pe, i) : 0;
    add_row<kVecLoads>(acc, src.template row<scalar_t>(col, pe, dim) + d0, edge_weight(mine, i, weighted), cols, i < n);
  }
}

// acc += edges [e0, e1) of a part, rows read in place. Rows off the 16-byte grid (the rare
// fallback: one load per column) go one edge at a time, which spares the kernels' registers.
template <typename scalar_t, typename Src>
__device__ __forceinline__ void add_edges_direct(typename LaneCols<scalar_t>::Acc& acc, const DevicePart& p, int32_t e0,
                                                 int32_t e1, const Src& src, int64_t dim, int64_t d0,
                                                 const LaneCols<scalar_t>& cols) {
  for (int32_t c = e0, n = 0; c < e1; c += n) {  // c + n <= e1: no 32-bit overflow
    n = e1 - c < kChunk ? e1 - c : kChunk;
    const LaneEdge mine = load_edge(p, c, n, cols.lane);
    const bool weighted = p.weight != nullptr;
    if (cols.vec) {
      add_chunk<true, 4>(acc, mine, n, weighted, src, dim, d0, cols);
    } else {
      add_chunk<false, 1>(acc, mine, n, weighted, src, dim, d0, cols);
    }
  }
}

// acc += the n landed rows of a chunk whose edges `mine` holds, read as the launch maps columns
// (LaneCols: runs with vec, else columns 32 apart).
template <typename scalar_t>
__device__ __forceinline__ void add_landed(typename LaneCols<scalar_t>::Acc& acc, const scalar_t* landing, int ld,
                                           const LaneEdge& mine, int n, bool weighted, const LaneCols<scalar_t>& cols) {
  for (int i = 0; i < n; i += cols.edges()) {
    const int e = i + cols.sub();
    const float w = edge_weight(mine, e, weighted);
    if (cols.vec) {
      add_row<true>(acc, landing + e * ld, w, cols, e < n);
    } else {
      add_row<false>(acc, landing + e * ld, w, cols);  // no lane groups: e = i < n
    }
  }
  __syncwarp();  // every lane is done with the landing buffer before it is refilled
}

// acc += edges [c, e1) of a part, fetched chunk by chunk into the landing buffer (not overlapped).
template <typename scalar_t, typename Src>
__device__ __forceinline__ void add_edges_landing(typename LaneCols<scalar_t>::Acc& acc, const DevicePart& p, int32_t c,
                                                  int32_t e1, const Src& src, scalar_t* landing,
                                                  const KernelArgs<scalar_t>& a, int64_t d0,
                                                  const LaneCols<scalar_t>& cols) {
  for (int32_t n = 0; c < e1; c += n) {  // c + n <= e1: no 32-bit overflow
    n = e1 - c < a.landing_rows ? e1 - c : a.landing_rows;
    const LaneEdge mine = load_edge(p, c, n, cols.lane);
    src.start(landing, a.tile, mine.col, mine.pe, n, a.dim, d0, cols.width, cols.lane);
    src.complete();
    add_landed(acc, landing, a.tile, mine, n, p.weight != nullptr, cols);
  }
}

// Adds a warp's sums for one row into the block's partial sum of that row (shared-memory atomic
// adds; every lane group adds its own sums, LaneCols), free of bank conflicts where the layout
// allows. Columns 32 apart (no vec) put lane l in bank l: no conflict. With runs, a lane's run of
// kVec columns lies in kVec consecutive banks and the runs of lanes kVec apart, so adding column
// k of every run at once would hit every kVec-th bank only (4-way fp32, 8-way fp16/bf16). So
// each lane visits its run rotated by r = (lane / (32 / kVec)) mod kVec: at step k it adds
// column col((k + r) mod kVec), the value picked by a barrel rotate of the run's registers with
// compile-time indices (acc stays in registers). The lanes'
// banks at one step, (slot kVec + (k + r) mod kVec) mod 32, are then all distinct for 32 lanes
// of distinct slots: 1 wavefront per add without lane groups. With lane groups of g lanes
// (slot = lane mod g, so r also differs between the groups) the 32 lanes hit 32 distinct words
// in distinct banks while the slice has at least 32 columns (fp32 D = 32, 64; fp16/bf16 D = 32
// to 128: 1 wavefront); a slice of 16 columns (D = 16) has 16 words for 32 lanes, each word
// taken by 2 lanes, whose atomics serialise: 2 wavefronts, the least possible (before the
// rotation: 8 at fp32).
template <typename scalar_t>
__device__ __forceinline__ void commit(typename LaneCols<scalar_t>::Acc& acc, float* partial,
                                       const LaneCols<scalar_t>& cols) {
  constexpr int kVec = LaneCols<scalar_t>::kVec;
  const int r = cols.vec ? (opaque(cols.lane) / (kWarp / kVec)) & (kVec - 1) : 0;  // computed here (LaneCols::col)
  float v[kVec];  // the run rotated left by r: v[k] = acc[(k + r) mod kVec]
#pragma unroll
  for (int k = 0; k < kVec; ++k) v[k] = acc[k];
#pragma unroll
  for (int s = 1; s < kVec; s *= 2) {
    const bool on = (r & s) != 0;
    float t[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) t[k] = on ? v[(k + s) & (kVec - 1)] : v[k];
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] = t[k];
  }
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const int d = cols.col((k + r) & (kVec - 1));
    MGG_SHARED_ATOMIC(partial + d, d < cols.width);
    if (d < cols.width) atomicAdd(partial + d, v[k]);
    acc[k] = 0.f;
  }
}

// Zeroes the block's partial sums; returns them.
__device__ __forceinline__ float* block_partials(unsigned char* smem, int64_t rows, int tile) {
  float* partial = reinterpret_cast<float*>(smem);
  for (int64_t i = threadIdx.x; i < rows * tile; i += blockDim.x) partial[i] = 0.f;
  __syncthreads();
  return partial;
}

// Writes each row of the block once: to the output, or to its scratch slot.
template <typename scalar_t>
__device__ __forceinline__ void write_block(const KernelArgs<scalar_t>& a, const int64_t* blk, const float* partial,
                                            int64_t d0, int width) {
  __syncthreads();
  const int64_t row0 = blk[kRowBegin], rows = blk[kRowEnd] - row0, slot = blk[kScratch];
  for (int64_t i = threadIdx.x; i < rows * width; i += blockDim.x) {
    const int64_t r = i / width;
    const int d = static_cast<int>(i - r * width);
    const float v = partial[r * a.tile + d];
    if (slot < 0) {
      a.out[(row0 + r) * a.dim + d0 + d] = from_float<scalar_t>(v);
    } else {
      a.scratch[slot * a.dim + d0 + d] = v;
    }
  }
}

// A warp's running sum over consecutive partitions of one row, local and remote alike.
template <typename scalar_t>
struct Run {
  typename LaneCols<scalar_t>::Acc acc;
  int32_t row = -1;
  __device__ __forceinline__ Run() { zero(acc); }
  // Before adding a partition of row r: commits the run of the previous row.
  __device__ __forceinline__ void enter(int32_t r, float* partial, int64_t row0, int tile,
                                        const LaneCols<scalar_t>& cols) {
    if (r != row) {
      finish(partial, row0, tile, cols);
      row = r;
    }
  }
  __device__ __forceinline__ void finish(float* partial, int64_t row0, int tile, const LaneCols<scalar_t>& cols) {
    if (row >= 0) commit(acc, partial + (row - row0) * tile, cols);
  }
};

// What a thread of a schedule block knows of its place: lane, warp, the block's row of the
// schedule, its column tile and the lane's columns of it, its zeroed partial sums and the warps'
// landing buffers.
template <typename scalar_t>
struct BlockCtx {
  int lane, warp, wpb;
  const int64_t* blk;
  int64_t row0, d0;
  LaneCols<scalar_t> cols;
  float* partial;
  scalar_t* landing_all;  // [wpb][landing_rows][tile]
  scalar_t* landing;      // this warp's
  // warps: the schedule's warps per block (the block's, unless it has a fetch warp beside them).
  __device__ __forceinline__ BlockCtx(const KernelArgs<scalar_t>& a, unsigned char* smem, int warps)
      : lane(threadIdx.x % kWarp),
        warp(threadIdx.x / kWarp),
        wpb(warps),
        blk(a.blocks + static_cast<int64_t>(blockIdx.x) * kBlockFields),
        row0(blk[kRowBegin]),
        d0(static_cast<int64_t>(blockIdx.y) * a.tile),
        cols{lane, static_cast<int>(a.dim - d0 < a.tile ? a.dim - d0 : a.tile), a.vec},
        partial(block_partials(smem, blk[kRowEnd] - row0, a.tile)),
        landing_all(reinterpret_cast<scalar_t*>(reinterpret_cast<float*>(smem) + 2 * wpb * a.tile)),
        landing(landing_all + static_cast<int64_t>(warp) * a.landing_rows * a.tile) {}
  __device__ __forceinline__ BlockCtx(const KernelArgs<scalar_t>& a, unsigned char* smem)
      : BlockCtx(a, smem, static_cast<int>(blockDim.x / kWarp)) {}
  // This warp's partitions of the local or remote part.
  __device__ __forceinline__ KernelWalk walk(const KernelArgs<scalar_t>& a, bool remote) const {
    return warp_walk<int32_t>(blk, remote, remote ? a.remote.rowptr : a.local.rowptr, a.ps, a.dist, warp);
  }
  // The warp's next local partition of walk lw, if any, added to its run: the local work done
  // while remote rows are fetched.
  template <typename LocalSrc>
  __device__ __forceinline__ void local_step(const KernelArgs<scalar_t>& a, KernelWalk& lw, Run<scalar_t>& run,
                                             const LocalSrc& lsrc) const {
    if (lw.done()) return;
    const KernelPartition p = lw.next(a.local.rowptr, a.ps);
    run.enter(p.row, partial, row0, a.tile, cols);
    add_edges_direct<scalar_t>(run.acc, a.local, p.begin, p.end, lsrc, a.dim, d0, cols);
  }
  // With interleave off (the contiguous mapping, an ablation), every local partition first, so
  // no fetch overlaps local work.
  template <typename LocalSrc>
  __device__ __forceinline__ void local_first(const KernelArgs<scalar_t>& a, KernelWalk& lw, Run<scalar_t>& run,
                                              const LocalSrc& lsrc) const {
    if (a.interleave) return;
    while (!lw.done()) local_step(a, lw, run, lsrc);
  }
};

template <typename scalar_t, typename LocalSrc, typename RemoteSrc>
__global__ void __launch_bounds__(kMaxThreads, kBlocksPerSm)
    aggregate_blocks_kernel(const KernelArgs<scalar_t> a, const LocalSrc lsrc, const RemoteSrc rsrc) {
  extern __shared__ __align__(16) unsigned char smem[];
  const BlockCtx<scalar_t> b(a, smem);
  const LaneCols<scalar_t>& cols = b.cols;
  const int lane = b.lane;
  const int64_t row0 = b.row0, d0 = b.d0;
  float* partial = b.partial;
  KernelWalk lw = b.walk(a, false), rw = b.walk(a, true);
  Run<scalar_t> run;  // one set of sums: a warp commits when it moves to another row
  b.local_first(a, lw, run, lsrc);
  while (!lw.done() || !rw.done()) {
    if (rw.done()) {
      b.local_step(a, lw, run, lsrc);
      continue;
    }
    const KernelPartition q = rw.next(a.remote.rowptr, a.ps);
    if constexpr (RemoteSrc::kUsesLanding) {
      const int n = q.end - q.begin < a.landing_rows ? q.end - q.begin : a.landing_rows;
      {  // 1. start the fetch
        const LaneEdge mine = load_edge(a.remote, q.begin, n, lane);
        rsrc.start(b.landing, a.tile, mine.col, mine.pe, n, a.dim, d0, cols.width, lane);
      }
      b.local_step(a, lw, run, lsrc);  // 2. local work meanwhile
      rsrc.complete();                 // 3. complete, then read
      run.enter(q.row, partial, row0, a.tile, cols);
      // The chunk's edges read again (cached) rather than held in registers across the local work.
      add_landed(run.acc, b.landing, a.tile, load_edge(a.remote, q.begin, n, lane), n, a.remote.weight != nullptr,
                 cols);
      add_edges_landing(run.acc, a.remote, q.begin + n, q.end, rsrc, b.landing, a, d0, cols);  // ps = 0
    } else {
      b.local_step(a, lw, run, lsrc);
      run.enter(q.row, partial, row0, a.tile, cols);
      add_edges_direct<scalar_t>(run.acc, a.remote, q.begin, q.end, rsrc, a.dim, d0, cols);
    }
  }
  run.finish(partial, row0, a.tile, cols);
  write_block(a, b.blk, partial, d0, cols.width);
}

template <typename scalar_t, typename LocalSrc, typename RemoteSrc>
__global__ void __launch_bounds__(kMaxThreads)
    aggregate_rows_kernel(const KernelArgs<scalar_t> a, const LocalSrc lsrc, const RemoteSrc rsrc) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + warp;
  if (row >= a.num_rows) return;  // whole warps leave; this kernel has no block barrier
  const int64_t d0 = static_cast<int64_t>(blockIdx.y) * a.tile;
  const LaneCols<scalar_t> cols{lane, static_cast<int>(a.dim - d0 < a.tile ? a.dim - d0 : a.tile), a.vec};
  scalar_t* landing = reinterpret_cast<scalar_t*>(smem) + static_cast<int64_t>(warp) * a.landing_rows * a.tile;
  typename LaneCols<scalar_t>::Acc acc;
  zero(acc);
  const auto edge = [](const int64_t* rowptr, int64_t r) {
    return static_cast<int32_t>(rowptr[r]);
  };  // < kMaxKernelIndex
  add_edges_direct<scalar_t>(acc, a.local, edge(a.local.rowptr, row), edge(a.local.rowptr, row + 1), lsrc, a.dim, d0,
                             cols);
  if (a.remote.rowptr) {
    const int32_t e0 = edge(a.remote.rowptr, row), e1 = edge(a.remote.rowptr, row + 1);
    if constexpr (RemoteSrc::kUsesLanding) {
      add_edges_landing(acc, a.remote, e0, e1, rsrc, landing, a, d0, cols);
    } else {
      add_edges_direct<scalar_t>(acc, a.remote, e0, e1, rsrc, a.dim, d0, cols);
    }
  }
  gather(acc, cols);
#pragma unroll
  for (int j = 0; j < LaneCols<scalar_t>::kVec; ++j) {
    const int d = cols.col(j);
    if (cols.sub() == 0 && d < cols.width) a.out[row * a.dim + d0 + d] = from_float<scalar_t>(acc[j]);
  }
}

// Row fixup_row[h] = sum of its scratch slots, in slot order.
template <typename scalar_t>
__global__ void aggregate_fixup_kernel(const KernelArgs<scalar_t> a) {
  const int64_t* f = a.fixups + static_cast<int64_t>(blockIdx.x) * kFixupFields;
  const int64_t d = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (d >= a.dim) return;
  float sum = 0.f;
  for (int64_t j = f[kFixBegin]; j < f[kFixEnd]; ++j) sum += a.scratch[j * a.dim + d];
  a.out[f[kFixRow] * a.dim + d] = from_float<scalar_t>(sum);
}

}  // namespace mgg::kernels
