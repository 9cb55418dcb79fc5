// The CUDA kernels of the mgg aggregation ops, templated on where source rows come from
// (fetch.cuh). Device code only: no ATen; the launcher is kernels/launch.cuh and the schedule is
// core/schedule.h, which the CPU executor walks the same way.
//
// aggregate_ranges_kernel: each warp walks its range of the step (an nnz-balanced run of rows and
// edges, core/schedule.h) row by row: a row's local edges, then its remote ones, summed in fp32
// registers, then written once with 16-byte stores (or, for a piece of a row cut by a warp
// boundary, to the warp's fp32 carry row, which aggregate_fixup_kernel sums in order). Warps are
// independent: no block barrier, no shared partial sums, no atomics; results are bit-identical
// from run to run.
//
// Within a warp:
// - The column ids, weights and owner PEs of each part stream through a window of kChunk edges
//   (lane i holds edge base + i, shuffled to the lanes that read the row), the next chunk loaded
//   ahead (EdgeWindow); the row ends come the same way, kWarp rows at a time (RowEnds).
// - Lanes own feature columns of a pass of `tile` columns (LaneCols): with 16-byte-aligned rows a
//   lane group reads a row, each lane kVecBytes-wide pieces of it, so one warp load instruction
//   serves kWarp / group edges; each lane issues kRowsInFlight independent 16-byte row loads before
//   it adds any of them (memory-level parallelism: 2 KB per warp in flight).
// - Remote rows fetched into shared memory (NVSHMEM gets, or mgg's asynchronous copies within a
//   node) land in chunks of landing_rows rows, double-buffered: chunk j + 1 is started as soon as
//   chunk j is waited for, so each fetch overlaps the local edges and the landed rows read meanwhile
//   (MGG's interleaving, §5.2; interleave off: a chunk is fetched only when it is needed).
// Registers: at most kBlockRegisters per thread (64 on sm_90), which CI's resource check holds
// without spills (bench/resources.py); CI's SASS check (bench/sass.py) holds the row loads in
// flight.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../core/launch_shape.h"
#include "../core/schedule.h"
#include "api.h"
#include "memory.cuh"
#include "registers.cuh"

namespace mgg::kernels {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kMaxThreads = static_cast<int>(kWpbMax) * kWarp;  // the widest block a config asks for
// The range kernels' launch bounds: kMaxThreads and this many blocks of them per SM, so ptxas
// keeps each thread within kBlockRegisters = 65536 / (kBlocksPerSm * kMaxThreads) registers: 64
// on sm_90 (H100/H200). sm_80's code gets 128 (1 block). bench/resources.py lists every kernel's
// registers and spills; CI fails on any spill, and on a range kernel over 64 registers on sm_90.
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

// fp16/bf16 pairs as one 32-bit word.
template <typename scalar_t>
using Pair = typename std::conditional<std::is_same<scalar_t, __half>::value, __half2, __nv_bfloat162>::type;

// The kVecBytes / sizeof(scalar_t) values of one 16-byte load as floats (fp16/bf16: a pair per
// 32-bit word, converted together).
template <typename scalar_t, int N>
__device__ __forceinline__ void unpack(const uint4& raw, float (&v)[N]) {
  static_assert(N * sizeof(scalar_t) == sizeof(uint4), "one value per element of the load");
  const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (sizeof(scalar_t) == 4) {
      memcpy(&v[i], &words[i], sizeof(float));
    } else {
      Pair<scalar_t> pair;
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

// 8 fp16/bf16 values (or 4 fp32) packed into one 16-byte store.
template <typename scalar_t, int N>
__device__ __forceinline__ uint4 pack(const float* v) {
  static_assert(N * sizeof(scalar_t) == sizeof(uint4), "one value per element of the store");
  unsigned words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (sizeof(scalar_t) == 4) {
      memcpy(&words[i], &v[i], sizeof(float));
    } else {
      Pair<scalar_t> pair;
      if constexpr (std::is_same<scalar_t, __half>::value) {
        pair = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
      } else {
        pair = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
      }
      memcpy(&words[i], static_cast<const void*>(&pair), sizeof(pair));
    }
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

// The step as the kernels read it: the api's Step with the launch's pass width and landing rows.
template <typename scalar_t>
struct KernelArgs {
  DevicePart local, remote;
  const int64_t* __restrict__ ranges;  // [num_warps + 1, kRangeFields]
  const int64_t* __restrict__ fixups;  // [num_fixups, kFixupFields]
  int64_t num_warps, num_fixups, num_rows, dim;
  int tile;          // columns of a pass: a multiple of 32, <= kMaxTile
  int landing_rows;  // rows of a landing chunk (<= kChunk)
  bool interleave;
  scalar_t* __restrict__ out;
  float* __restrict__ carry;  // [num_slots, dim]
};

// The columns [0, width) of a pass a lane owns: its acc[j] (j < kPer) is column col(j), the one
// place the kernels map a lane's registers to columns (loads, sums, stores). kPer = V kVecBytes
// pieces of a row: fp32 V = 1 (4 columns, passes up to 128 columns) or V = 2 (8 columns, up to
// 256), fp16/bf16 V = 1 (8 columns). With vec (every row of the launch on a kVecBytes boundary,
// launch.cuh's vector_rows, so width is a multiple of kVec) a lane owns kPer consecutive columns,
// the lanes' runs side by side; otherwise lane `lane` owns columns lane + 32 j, each load of a row
// coalesced across the warp.
//
// Lane groups (vec, a pass of at most 16 runs): a group of `group` lanes (the runs, rounded up to
// a power of two) reads one row, so one warp instruction reads the rows of kWarp / group edges:
// lane `lane` is lane `slot` of group `sub`. Each group sums its own edges, and at a row's end
// reduce() adds them into group 0's lanes, which alone write. Without groups, group = kWarp.
template <typename scalar_t, int V, bool kVecRows>
struct LaneCols {
  static constexpr int kVec = kVecBytes / static_cast<int>(sizeof(scalar_t));
  static constexpr int kPer = V * kVec;
  static constexpr bool vec = kVecRows;
  static_assert(kWarp * kPer <= kMaxTile, "a pass is at most kMaxTile columns");
  using Acc = float[kPer];  // a lane's sums: acc[j] is column col(j)
  int width;
  int shift;  // log2 of group
  __device__ __forceinline__ explicit LaneCols(int width_) : width(width_), shift(5) {
    const int n = (width + kPer - 1) / kPer;  // runs of the pass
    if (vec && n <= kWarp / 2) {
      shift = 0;
      while ((1 << shift) < n) ++shift;
    }
  }
  // The lane, read where it is used (opaque(): the compiler can neither hold it nor the columns of
  // every call site for the kernel's whole run, which the walk's registers cannot spare).
  __device__ __forceinline__ int lane() const { return opaque(static_cast<int>(threadIdx.x)) & (kWarp - 1); }
  __device__ __forceinline__ int group() const { return 1 << shift; }
  __device__ __forceinline__ int sub() const { return lane() >> shift; }
  __device__ __forceinline__ int edges() const { return kWarp >> shift; }  // edges per instruction
  __device__ __forceinline__ int col(int j) const {
    const int l = lane();
    return vec ? (l & (group() - 1)) * kPer + j : j * kWarp + l;
  }
};

template <int N>
__device__ __forceinline__ void zero(float (&acc)[N]) {
#pragma unroll
  for (int j = 0; j < N; ++j) acc[j] = 0.f;
}

// What a warp knows of its range (core/schedule.h), kept in shared memory and read where it is
// used (held in registers for the whole walk, it spilled): the edges of each part it walks, its
// streams [origin, origin + size) (positions in a stream are 32-bit offsets from its origin: a
// range is at most kPsMax * kDistMax items; only the loads add the 64-bit origin), the rows it
// starts and ends at, and its carry slots.
struct WarpRange {
  int64_t origin[2];
  int32_t size[2];
  int32_t row0, row1, head, tail;
  int32_t chunk, landed;  // remote rows fetched: the window's chunk, the last chunk waited for (-1: none)
};
using Range = volatile WarpRange;
enum Part : int { kLocalPart, kRemotePart };

// A warp's window on one part's stream, whose chunks of `len` edges start at multiples of len:
// lane i holds edge i of the current chunk (its column, weight and, where kPe, owner PE) and edge i
// of the next chunk, loaded ahead when the window moves, so the next chunk's loads are in flight
// while the current one is read. The caller knows which chunk is current (the chunk of its next
// edge), so the window holds no position.
template <bool kPe>
struct EdgeWindow {
  int32_t col, next_col, pe, next_pe;
  float w, next_w;

  __device__ __forceinline__ static void load(const DevicePart& p, Range& m, int part, int32_t at, int len, int lane,
                                              int32_t& c, float& w, int32_t& q) {
    const bool on = lane < len && at + lane < m.size[part];
    const int64_t e = m.origin[part] + at + lane;
    MGG_GLOBAL_LOAD(p.col + e, on);
    c = on ? load_stream(p.col + e) : 0;
    w = 1.f;
    if (p.weight) {  // uniform across the warp
      MGG_GLOBAL_LOAD(p.weight + e, on);
      w = on ? load_stream(p.weight + e) : 0.f;
    }
    q = 0;
    if constexpr (kPe) {
      MGG_GLOBAL_LOAD(p.pe + e, on);
      q = on ? load_stream(p.pe + e) : 0;
    }
  }
  __device__ __forceinline__ void start(const DevicePart& p, Range& m, int part, int len, int lane) {
    load(p, m, part, 0, len, lane, col, w, pe);
    load(p, m, part, len, len, lane, next_col, next_w, next_pe);
  }
  // Moves to the next chunk, which starts at edge `begin`.
  __device__ __forceinline__ void advance(const DevicePart& p, Range& m, int part, int32_t begin, int len, int lane) {
    col = next_col;
    w = next_w;
    pe = next_pe;
    load(p, m, part, begin + len, len, lane, next_col, next_w, next_pe);
  }
};

// The ends of a warp's rows as offsets in its streams, staged in the warp's shared memory
// (kRowEndBytes, read at each row's start; in registers they spilled): entry i of each part is
// rowptr[row + 1 + i] - origin for the kWarp rows from `row` on, up to the last row the warp ends
// (row1 - 1, whose end lies within its streams). Lane i loads entry i.
struct RowEnds {
  int32_t* ends;  // [2][kWarp]: local, remote
  __device__ __forceinline__ void load(const DevicePart& l, const DevicePart& r, Range& m, int32_t row,
                                       int lane) const {
    const int64_t i = static_cast<int64_t>(row) + 1 + lane;
    const bool on = i <= m.row1;  // rows up to row1 - 1
    __syncwarp();                 // every lane has read the previous rows' ends
    MGG_GLOBAL_LOAD(l.rowptr + i, on);
    MGG_SHARED_STORE(ends + lane, on);
    if (on) ends[lane] = static_cast<int32_t>(load_stream(l.rowptr + i) - m.origin[kLocalPart]);
    if (r.rowptr) {  // uniform
      MGG_GLOBAL_LOAD(r.rowptr + i, on);
      MGG_SHARED_STORE(ends + kWarp + lane, on);
      if (on) ends[kWarp + lane] = static_cast<int32_t>(load_stream(r.rowptr + i) - m.origin[kRemotePart]);
    }
    __syncwarp();
  }
  __device__ __forceinline__ int32_t local(int at) const {
    MGG_SHARED_LOAD(ends + at, true);
    return ends[at];
  }
  __device__ __forceinline__ int32_t remote(int at) const {
    MGG_SHARED_LOAD(ends + kWarp + at, true);
    return ends[kWarp + at];
  }
};

// A lane's kVecBytes pieces of one row, loaded before any is added.
template <int V>
struct RowBits {
  uint4 v[V];
};

// Issues the loads of a lane's columns of one source row (vec): V 16-byte pieces; `has` false (a
// lane group past the chunk's edges) or columns past the pass: no load, zeros. kShared: the row
// lies in a landing buffer (shared memory).
template <bool kShared, typename scalar_t, int V, bool kVecRows>
__device__ __forceinline__ void load_bits(RowBits<V>& b, const scalar_t* src, bool has,
                                          const LaneCols<scalar_t, V, kVecRows>& cols) {
  constexpr int kVec = LaneCols<scalar_t, V, kVecRows>::kVec;
  const int d = cols.col(0);
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const bool on = has && d + v * kVec < cols.width;
    const uint4* p = reinterpret_cast<const uint4*>(src + d) + v;
    if constexpr (kShared) {
      MGG_SHARED_LOAD(p, on);
      b.v[v] = on ? *p : make_uint4(0, 0, 0, 0);
    } else {
      MGG_GLOBAL_LOAD(p, on);
      b.v[v] = on ? load_row(p) : make_uint4(0, 0, 0, 0);
    }
  }
}

template <typename scalar_t, int V>
__device__ __forceinline__ void add_bits(float (&acc)[V * kVecBytes / sizeof(scalar_t)], const RowBits<V>& b, float w) {
  constexpr int kVec = kVecBytes / static_cast<int>(sizeof(scalar_t));
#pragma unroll
  for (int v = 0; v < V; ++v) {
    float x[kVec];
    unpack<scalar_t>(b.v[v], x);
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc[v * kVec + k] += w * x[k];
  }
}

// acc += the rows of edges [first, first + n) of a window's current chunk (n > 0, first + n <= len),
// each edge's row given by row_at(edge index in the chunk, column, PE). vec: kRowsInFlight / V edges
// per lane group at a time (kShared: one), all their loads issued before the first add (lane groups
// past n load nothing and add zeros). Otherwise one edge at a time, a load per column.
template <bool kShared, typename scalar_t, int V, bool kVecRows, bool kPe, typename RowAt>
__device__ __forceinline__ void add_chunk(typename LaneCols<scalar_t, V, kVecRows>::Acc& acc,
                                          const EdgeWindow<kPe>& win, int first, int n, bool weighted,
                                          const LaneCols<scalar_t, V, kVecRows>& cols, RowAt&& row_at) {
  if constexpr (kVecRows) {
    // Rows in global memory: kRowsInFlight loads in flight per lane. Landed rows (shared memory,
    // a short latency) one edge at a time: their loads need no registers held for latency.
    constexpr int kK = kShared ? 1 : kRowsInFlight / V;
    const int step = cols.edges();
    for (int i0 = 0; i0 < n; i0 += step * kK) {
      RowBits<V> bits[kK];
      float w[kK];
#pragma unroll
      for (int k = 0; k < kK; ++k) {
        const int i = i0 + k * step + cols.sub();
        const bool has = i < n;
        const int at = (first + i) & (kWarp - 1);
        const int32_t col = __shfl_sync(kFull, win.col, at);
        const int32_t pe = kPe ? __shfl_sync(kFull, win.pe, at) : 0;
        const float wt = weighted ? __shfl_sync(kFull, win.w, at) : 1.f;
        w[k] = has ? wt : 0.f;
        load_bits<kShared>(bits[k], row_at(first + i, col, pe), has, cols);
      }
#pragma unroll
      for (int k = 0; k < kK; ++k) add_bits<scalar_t, V>(acc, bits[k], w[k]);
    }
  } else {
    for (int i = 0; i < n; ++i) {
      const int32_t col = __shfl_sync(kFull, win.col, first + i);
      const int32_t pe = kPe ? __shfl_sync(kFull, win.pe, first + i) : 0;
      const float w = weighted ? __shfl_sync(kFull, win.w, first + i) : 1.f;
      const int d = cols.col(0);  // column d + kWarp j: one address, offsets in the instructions
      const scalar_t* src = row_at(first + i, col, pe) + d;
#pragma unroll
      for (int j = 0; j < LaneCols<scalar_t, V, kVecRows>::kPer; ++j) {
        const bool on = d + j * kWarp < cols.width;
        if constexpr (kShared) {
          MGG_SHARED_LOAD(src + j * kWarp, on);
        } else {
          MGG_GLOBAL_LOAD(src + j * kWarp, on);
        }
        if (on) acc[j] += w * to_float(src[j * kWarp]);
      }
    }
  }
}

// acc += the rows of a stream's edges [e, end) (offsets in the stream) read in place through src;
// the window (chunks of kChunk) holds the chunk of e, and moves on as soon as e reaches the next.
template <typename scalar_t, int V, bool kVecRows, bool kPe, typename Src>
__device__ __forceinline__ void add_direct(typename LaneCols<scalar_t, V, kVecRows>::Acc& acc, EdgeWindow<kPe>& win,
                                           const DevicePart& p, Range& m, int part, int32_t e, int32_t end,
                                           const Src& src, int64_t dim, int d0,
                                           const LaneCols<scalar_t, V, kVecRows>& cols) {
  const bool weighted = p.weight != nullptr;
  while (e < end) {
    const int first = e & (kChunk - 1);
    const int n = end - e < kChunk - first ? end - e : kChunk - first;
    add_chunk<false>(acc, win, first, n, weighted, cols,
                     [&](int, int32_t col, int32_t pe) { return src.template row<scalar_t>(col, pe, dim) + d0; });
    e += n;
    if ((e & (kChunk - 1)) == 0) win.advance(p, m, part, e, kChunk, cols.lane());
  }
}

// The landing chunks of a warp's remote edges: two buffers of `rows` rows of `ld` elements at
// `buf`; chunk j (the stream's edges [j * rows, (j + 1) * rows), the window's chunks) lands in
// buffer j % 2. Which chunk the window holds and which was last waited for are in the warp's
// WarpRange (chunk, landed).
template <typename scalar_t>
struct Landing {
  scalar_t* buf;
  int rows, ld;
  __device__ __forceinline__ scalar_t* at(int32_t j) const { return buf + static_cast<int64_t>(j & 1) * rows * ld; }
  // Starts fetching chunk `j` (n rows, their columns and PEs held by the lanes as c and q).
  template <typename Src>
  __device__ __forceinline__ void start(const Src& src, int32_t j, int32_t c, int32_t q, int n, int64_t dim, int d0,
                                        int width, int lane) const {
    src.template start<scalar_t>(at(j), ld, c, q, n, dim, d0, width, lane);
  }
};

// acc += the rows of the remote stream's edges [e, end), fetched chunk by chunk into the landing
// buffers: when the edges reach a chunk not yet waited for, wait for it (fetching it first when
// interleave is off) and start the next one (interleave on), then read the landed rows.
template <typename scalar_t, int V, bool kVecRows, typename Src>
__device__ __forceinline__ void add_landed(typename LaneCols<scalar_t, V, kVecRows>::Acc& acc, EdgeWindow<true>& win,
                                           const Landing<scalar_t>& land, const DevicePart& p, Range& m, int32_t e,
                                           int32_t end, const Src& src, bool interleave, int64_t dim, int d0,
                                           const LaneCols<scalar_t, V, kVecRows>& cols) {
  const bool weighted = p.weight != nullptr;
  const int len = land.rows;
  while (e < end) {
    int32_t chunk = m.chunk;
    if (e - chunk * len >= len) {  // the edges reached the next chunk
      ++chunk;
      win.advance(p, m, kRemotePart, chunk * len, len, cols.lane());
      __syncwarp();  // every lane has read m.chunk
      if (cols.lane() == 0) m.chunk = chunk;
    }
    const int32_t base = chunk * len;
    if (m.landed != chunk) {  // uniform
      if (!interleave) {
        const int n = m.size[kRemotePart] - base < len ? m.size[kRemotePart] - base : len;
        land.start(src, chunk, win.col, win.pe, n, dim, d0, cols.width, cols.lane());
      }
      src.complete();  // waits, then __syncwarp: every lane has read m.landed
      if (cols.lane() == 0) m.landed = chunk;
      const int32_t next = base + len;
      if (interleave && next < m.size[kRemotePart]) {
        const int n = m.size[kRemotePart] - next < len ? m.size[kRemotePart] - next : len;
        land.start(src, chunk + 1, win.next_col, win.next_pe, n, dim, d0, cols.width, cols.lane());
      }
      __syncwarp();
    }
    const int first = e - base;
    const int n = end - e < len - first ? end - e : len - first;
    const scalar_t* rows = land.at(chunk);
    add_chunk<true>(acc, win, first, n, weighted, cols,
                    [&](int i, int32_t, int32_t) { return rows + static_cast<int64_t>(i) * land.ld; });
    e += n;
  }
}

// Adds every lane group's sums into group 0's lanes (LaneCols), whose sums are then the warp's.
template <typename scalar_t, int V, bool kVecRows>
__device__ __forceinline__ void reduce(typename LaneCols<scalar_t, V, kVecRows>::Acc& acc,
                                       const LaneCols<scalar_t, V, kVecRows>& c) {
  for (int off = kWarp / 2; off >= c.group(); off /= 2) {  // uniform across the warp
#pragma unroll
    for (int k = 0; k < LaneCols<scalar_t, V, kVecRows>::kPer; ++k) acc[k] += __shfl_down_sync(kFull, acc[k], off);
  }
}

// Writes group 0's sums: to `row` of the output in the storage type, 16 bytes at a time (vec).
template <typename T, typename scalar_t, int V, bool kVecRows>
__device__ __forceinline__ void store_sums(T* row, const typename LaneCols<scalar_t, V, kVecRows>::Acc& acc,
                                           const LaneCols<scalar_t, V, kVecRows>& cols) {
  if (cols.sub() != 0) return;
  if constexpr (kVecRows) {
    constexpr int kOut = kVecBytes / static_cast<int>(sizeof(T));  // values of one store
    const int d = cols.col(0);
#pragma unroll
    for (int v = 0; v < LaneCols<scalar_t, V, kVecRows>::kPer / kOut; ++v) {
      if (d + v * kOut < cols.width) {
        store_stream(reinterpret_cast<uint4*>(row + d) + v, pack<T, kOut>(acc + v * kOut));
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < LaneCols<scalar_t, V, kVecRows>::kPer; ++j) {
      const int d = cols.col(j);
      if (d < cols.width) row[d] = from_float<T>(acc[j]);
    }
  }
}

// One warp's range of the step (core/schedule.h): `warp` is its index, `smem` its shared memory
// (WarpSmem).
template <typename scalar_t, int V, bool kVecRows, typename LocalSrc, typename RemoteSrc>
__device__ __forceinline__ void aggregate_range(const KernelArgs<scalar_t>& a, const LocalSrc& lsrc,
                                                const RemoteSrc& rsrc, int64_t warp, unsigned char* smem) {
  constexpr bool kLanding = RemoteSrc::kUsesLanding;
  constexpr bool kPe = kLanding || RemoteSrc::kReadsPe;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  // Records warp and warp + 1: lane f < 2 kRangeFields loads field f, one instruction for both.
  const int64_t* rec = a.ranges + warp * kRangeFields;
  const bool field = lane < 2 * kRangeFields;
  MGG_GLOBAL_LOAD(rec + lane, field);
  const int64_t f = field ? load_stream(rec + lane) : 0;
  __shared__ WarpRange ranges[kWpbMax];
  Range& m = ranges[threadIdx.x / kWarp];
  {
    const int64_t l0 = __shfl_sync(kFull, f, kRangeLocal), q0 = __shfl_sync(kFull, f, kRangeRemote);
    const int64_t l1 = __shfl_sync(kFull, f, kRangeFields + kRangeLocal);
    const int64_t q1 = __shfl_sync(kFull, f, kRangeFields + kRangeRemote);
    if (lane == 0) {
      m.chunk = 0;
      m.landed = -1;
      m.origin[kLocalPart] = l0;
      m.origin[kRemotePart] = q0;
      m.size[kLocalPart] = static_cast<int32_t>(l1 - l0);
      m.size[kRemotePart] = static_cast<int32_t>(q1 - q0);
    }
    if (lane == kRangeRow) m.row0 = static_cast<int32_t>(f);
    if (lane == kRangeFields + kRangeRow) m.row1 = static_cast<int32_t>(f);
    if (lane == kRangeHead) m.head = static_cast<int32_t>(f);
    if (lane == kRangeTail) m.tail = static_cast<int32_t>(f);
    __syncwarp();
  }
  const int d0 = static_cast<int>(blockIdx.y) * a.tile;  // the pass's first column (< dim)
  const LaneCols<scalar_t, V, kVecRows> cols(static_cast<int>(a.dim - d0 < a.tile ? a.dim - d0 : a.tile));
  const bool remote = a.remote.rowptr != nullptr;  // uniform
  const int rlen = kLanding ? a.landing_rows : kChunk;

  EdgeWindow<false> lw;
  lw.start(a.local, m, kLocalPart, kChunk, lane);
  EdgeWindow<kPe> rw;
  const Landing<scalar_t> land{reinterpret_cast<scalar_t*>(smem + kRowEndBytes), a.landing_rows, a.tile};
  if (remote) {
    rw.start(a.remote, m, kRemotePart, rlen, lane);
    if constexpr (kLanding) {
      const int32_t size = m.size[kRemotePart];
      if (a.interleave && size > 0) {  // chunk 0 in flight while the first local edges are read
        land.start(rsrc, 0, rw.col, rw.pe, size < rlen ? size : rlen, a.dim, d0, cols.width, lane);
      }
    }
  }
  const RowEnds ends{reinterpret_cast<int32_t*>(smem)};
  int32_t l = 0, q = 0;  // offsets in the streams
  // Rows row0 .. row1 - 1 end in the warp; row1 is visited for the warp's piece of it only.
  for (int32_t r = m.row0; r < m.row1 + (m.tail >= 0); ++r) {
    const bool ends_row = r < m.row1;
    const int at = (r - m.row0) & (kWarp - 1);  // r's lane in `ends`, which holds kWarp rows from row0 on
    if (ends_row && at == 0) ends.load(a.local, a.remote, m, r, lane);
    const int32_t l_end = ends_row ? ends.local(at) : m.size[kLocalPart];
    typename LaneCols<scalar_t, V, kVecRows>::Acc acc;
    zero(acc);
    add_direct(acc, lw, a.local, m, kLocalPart, l, l_end, lsrc, a.dim, d0, cols);
    l = l_end;
    if (remote) {
      const int32_t q_end = ends_row ? ends.remote(at) : m.size[kRemotePart];
      if constexpr (kLanding) {
        add_landed(acc, rw, land, a.remote, m, q, q_end, rsrc, a.interleave, a.dim, d0, cols);
      } else {
        add_direct(acc, rw, a.remote, m, kRemotePart, q, q_end, rsrc, a.dim, d0, cols);
      }
      q = q_end;
    }
    reduce(acc, cols);
    const int32_t slot = !ends_row ? m.tail : r == m.row0 ? m.head : -1;
    if (slot >= 0) {
      store_sums<float>(a.carry + static_cast<int64_t>(slot) * a.dim + d0, acc, cols);
    } else {
      store_sums<scalar_t>(a.out + static_cast<int64_t>(r) * a.dim + d0, acc, cols);
    }
  }
}

// A warp's dynamic shared memory (core/launch_shape.h's warp_smem_bytes): its row ends
// (kRowEndBytes), then its landing buffers (kLandingBuffers chunks of landing_rows rows of the
// pass's columns).
template <typename scalar_t>
__device__ __forceinline__ unsigned char* warp_smem(unsigned char* smem, const KernelArgs<scalar_t>& a) {
  return smem + (threadIdx.x / kWarp) * warp_smem_bytes(a.tile, a.landing_rows, sizeof(scalar_t));
}

// The launch bounds: kMaxThreads in kBlocksPerSm blocks per SM (kBlockRegisters). The proxy path's
// kernels (kNvshmemGets: NVSHMEM's get and quiet inlined in every warp) need more registers than
// that: half the threads, one block (255 registers; they take at most kWpbMax / 2 warps a block).
template <bool kNvshmemGets>
constexpr int kBoundThreads = kNvshmemGets ? kMaxThreads / 2 : kMaxThreads;
template <bool kNvshmemGets>
constexpr int kBoundBlocks = kNvshmemGets ? 1 : kBlocksPerSm;

template <typename scalar_t, int V, bool kVecRows, typename LocalSrc, typename RemoteSrc, bool kNvshmemGets = false>
__global__ void __launch_bounds__(kBoundThreads<kNvshmemGets>, kBoundBlocks<kNvshmemGets>)
    aggregate_ranges_kernel(const KernelArgs<scalar_t> a, const LocalSrc lsrc, const RemoteSrc rsrc) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (warp >= a.num_warps) return;  // whole warps leave; this kernel has no block barrier
  aggregate_range<scalar_t, V, kVecRows>(a, lsrc, rsrc, warp, warp_smem(smem, a));
}

// Split row h (fixups[h]) = the sum of its carry rows in slot order; a warp per row, lanes over
// the columns.
template <typename scalar_t>
__global__ void __launch_bounds__(256) aggregate_fixup_kernel(const KernelArgs<scalar_t> a) {
  const int64_t h = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (h >= a.num_fixups) return;
  const int64_t* f = a.fixups + h * kFixupFields;
  const int64_t row = f[kFixRow], begin = f[kFixBegin], end = f[kFixEnd];
  for (int64_t d = threadIdx.x % kWarp; d < a.dim; d += kWarp) {
    float sum = 0.f;
    for (int64_t j = begin; j < end; ++j) sum += a.carry[j * a.dim + d];
    a.out[row * a.dim + d] = from_float<scalar_t>(sum);
  }
}

}  // namespace mgg::kernels
