// The row kernels of row_kernels.h for one instruction set: included once by each of
// row_kernels_{default,avx2,avx512}.cpp, which set MGG_ISA (the namespace of this copy) and
// ATen's CPU_CAPABILITY macros (which Vectorized specialisation is compiled) first.
//
// sum: for each output row and each tile of its columns (up to kMaxVectors vectors, so the
// accumulators stay in registers; a last partial vector for a width that is not a multiple of the
// vector), the row's edges are walked in order, each source row's tile loaded (fp16/bf16 widened
// to fp32) and added, times its weight, to the accumulators; the source row kAhead edges ahead is
// prefetched, up to the last edge of the thread's range. extreme: max/min per element, the first
// edge's row taken as it is and every later one compared branch-free under core/extreme.h's rule.
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/macros/Macros.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "../../core/executor.h"
#include "../../core/extreme.h"
#include "row_kernels.h"

#ifndef MGG_ISA
#error "row_kernels_impl.h is included by row_kernels_<isa>.cpp, which names the instruction set (MGG_ISA)"
#endif

namespace mgg::cpu::MGG_ISA {
namespace {

using at::vec::Vectorized;

template <typename scalar_t>
using acc_type = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;

// The accumulators of a tile: 8 of AVX2's 16 vector registers (of AVX-512's 32). ATen's DEFAULT
// vector is 32 bytes on x86, two of SSE's 16 registers, so 4 of them fill 8 there (and 8-vector
// tiles of the emulated vector took g++ a minute and a half to compile).
#ifdef CPU_CAPABILITY_DEFAULT
constexpr int kMaxVectors = 4;
#else
constexpr int kMaxVectors = 8;
#endif
constexpr int64_t kAhead = 16;  // edges between a source row's prefetch and its load
constexpr int64_t kLine = 64;   // bytes a prefetch brings

// V elements of a source row (scalar_t) as one vector of the accumulation type.
template <typename scalar_t>
inline Vectorized<acc_type<scalar_t>> load_vector(const scalar_t* p) {
  if constexpr (std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, double>) {
    return Vectorized<scalar_t>::loadu(p);
  } else {
    Vectorized<float> v;
    at::vec::load_to_float<scalar_t>(p, v);
    return v;
  }
}

// The first n < V elements, the others zero.
template <typename scalar_t>
inline Vectorized<acc_type<scalar_t>> load_tail(const scalar_t* p, int64_t n) {
  if constexpr (std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, double>) {
    return Vectorized<scalar_t>::loadu(p, n);
  } else {
    scalar_t buf[Vectorized<float>::size()] = {};
    std::copy(p, p + n, buf);
    return load_vector(buf);
  }
}

// The first n <= V elements of v into o.
template <typename scalar_t>
inline void store_vector(const Vectorized<acc_type<scalar_t>>& v, scalar_t* o, int64_t n) {
  if constexpr (std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, double>) {
    v.store(o, static_cast<int>(n));
  } else {  // rounded to nearest even by ATen's vector conversion: its first V lanes are v's
    at::vec::convert_from_float<scalar_t>(v, Vectorized<float>(0)).store(o, static_cast<int>(n));
  }
}

// A tile of a row: columns [d0, d0 + NV * V), the last vector holding only `last` elements (V: all).
template <int NV>
struct Tile {
  int64_t d0, last;
};

// acc += the tile of the source rows (a TableSource or PeerSource, core/executor.h) of edges
// [begin, end) of part p (times their weights), the rows of edges up to `ahead_end` prefetched
// kAhead edges ahead. kFull: the tile's last vector is whole (else it holds t.last elements).
// Always inlined into sum_tile, so that the accumulators live in registers across the edges.
template <typename scalar_t, int NV, bool kWeighted, bool kFull, typename Rows>
C10_ALWAYS_INLINE void gather(Vectorized<acc_type<scalar_t>> (&acc)[NV], const RowPart& p, const Rows& rows,
                              int64_t begin, int64_t end, int64_t ahead_end, Tile<NV> t) {
  using acc_t = acc_type<scalar_t>;
  using Vec = Vectorized<acc_t>;
  constexpr int64_t V = Vec::size();
  const int64_t bytes = ((NV - 1) * V + t.last) * static_cast<int64_t>(sizeof(scalar_t));
  const acc_t* weight = static_cast<const acc_t*>(p.weight);
  for (int64_t e = begin; e < end; ++e) {
    if (e + kAhead < ahead_end) {
      const char* next = reinterpret_cast<const char*>(rows.row(p.pe, p.col, e + kAhead) + t.d0);
      for (int64_t b = 0; b < bytes; b += kLine) __builtin_prefetch(next + b, 0, 3);
    }
    const scalar_t* x = rows.row(p.pe, p.col, e) + t.d0;
    Vec v[NV];
#pragma GCC unroll 8
    for (int j = 0; j < NV - 1; ++j) v[j] = load_vector(x + j * V);
    v[NV - 1] = kFull ? load_vector(x + (NV - 1) * V) : load_tail(x + (NV - 1) * V, t.last);
    if constexpr (kWeighted) {
      const Vec w(weight[e]);
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) acc[j] = at::vec::fmadd(v[j], w, acc[j]);
    } else {
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) acc[j] = acc[j] + v[j];
    }
  }
}

template <typename scalar_t, int NV, typename Rows>
C10_ALWAYS_INLINE void gather_part(Vectorized<acc_type<scalar_t>> (&acc)[NV], const RowPart& p, const Rows& rows,
                                   int64_t r, int64_t ahead_end, Tile<NV> t) {
  constexpr int64_t V = Vectorized<acc_type<scalar_t>>::size();
  const int64_t b = p.rowptr[r], e = p.rowptr[r + 1];
  if (t.last == V) {
    if (p.weight)
      gather<scalar_t, NV, true, true>(acc, p, rows, b, e, ahead_end, t);
    else
      gather<scalar_t, NV, false, true>(acc, p, rows, b, e, ahead_end, t);
  } else {
    if (p.weight)
      gather<scalar_t, NV, true, false>(acc, p, rows, b, e, ahead_end, t);
    else
      gather<scalar_t, NV, false, false>(acc, p, rows, b, e, ahead_end, t);
  }
}

template <typename scalar_t, int NV, typename RemoteRows>
C10_ALWAYS_INLINE void sum_tile(const RowsCall& c, const TableSource<scalar_t>& lrows, const RemoteRows& rrows,
                                int64_t r, int64_t local_end, int64_t remote_end, Tile<NV> t) {
  using Vec = Vectorized<acc_type<scalar_t>>;
  constexpr int64_t V = Vec::size();
  Vec acc[NV];
#pragma GCC unroll 8
  for (int j = 0; j < NV; ++j) acc[j] = Vec(0);
  gather_part<scalar_t>(acc, c.local, lrows, r, local_end, t);
  if (c.remote.rowptr) gather_part<scalar_t>(acc, c.remote, rrows, r, remote_end, t);
  scalar_t* o = static_cast<scalar_t*>(c.out) + r * c.dim + t.d0;
#pragma GCC unroll 8
  for (int j = 0; j < NV - 1; ++j) store_vector(acc[j], o + j * V, V);
  store_vector(acc[NV - 1], o + (NV - 1) * V, t.last);
}

// Rows [r0, r1), each with whole tiles of kMaxVectors vectors from column 0 up to `d_rest`, then
// one tile of NV vectors (the last holding `last` elements). The tile size is a template argument
// here, outside the row loop, so a narrow row costs no dispatch of its own.
template <typename scalar_t, int NV, typename RemoteRows>
void sum_range(const RowsCall& c, const TableSource<scalar_t>& lrows, const RemoteRows& rrows, int64_t r0, int64_t r1,
               int64_t d_rest, int64_t last) {
  constexpr int64_t V = Vectorized<acc_type<scalar_t>>::size();
  // the last edge whose source row is prefetched (none where the part's table stays in cache)
  const int64_t local_end = c.local.prefetch ? c.local.rowptr[r1] : 0;
  const int64_t remote_end = c.remote.rowptr && c.remote.prefetch ? c.remote.rowptr[r1] : 0;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t d0 = 0; d0 < d_rest; d0 += kMaxVectors * V)
      sum_tile<scalar_t, kMaxVectors>(c, lrows, rrows, r, local_end, remote_end, Tile<kMaxVectors>{d0, V});
    sum_tile<scalar_t, NV>(c, lrows, rrows, r, local_end, remote_end, Tile<NV>{d_rest, last});
  }
}

// sum_range with its last tile's width NV chosen from `rest` (1 to kMaxVectors) by recursion, so
// that only the widths this copy uses are compiled.
template <typename scalar_t, int NV, typename RemoteRows>
void sum_range_of_width(const RowsCall& c, const TableSource<scalar_t>& lrows, const RemoteRows& rrows, int64_t r0,
                        int64_t r1, int64_t rest, int64_t d_rest, int64_t last) {
  if constexpr (NV < kMaxVectors) {
    if (rest != NV) return sum_range_of_width<scalar_t, NV + 1>(c, lrows, rrows, r0, r1, rest, d_rest, last);
  }
  sum_range<scalar_t, NV>(c, lrows, rrows, r0, r1, d_rest, last);
}

// Rows [r0, r1): each row's columns in tiles of kMaxVectors vectors, then one tile of the 1 to
// kMaxVectors vectors left, its last vector partial where dim is not a multiple of V.
template <typename scalar_t, typename RemoteRows>
void sum_rows_with(const RowsCall& c, const RemoteRows& rrows, int64_t r0, int64_t r1) {
  constexpr int64_t V = Vectorized<acc_type<scalar_t>>::size();
  const TableSource<scalar_t> lrows{static_cast<const scalar_t*>(c.local.table), c.dim};
  const int64_t vectors = (c.dim + V - 1) / V, last = c.dim - (vectors - 1) * V;
  const int64_t rest = (vectors - 1) % kMaxVectors + 1;  // the vectors of the last tile
  sum_range_of_width<scalar_t, 1>(c, lrows, rrows, r0, r1, rest, (vectors - rest) * V, last);
}

template <typename scalar_t>
void sum_rows(const RowsCall& c, int64_t r0, int64_t r1) {
  if (c.remote.pe)
    sum_rows_with<scalar_t>(c, PeerSource<scalar_t>{c.remote.peers, c.dim}, r0, r1);
  else
    sum_rows_with<scalar_t>(c, TableSource<scalar_t>{static_cast<const scalar_t*>(c.remote.table), c.dim}, r0, r1);
}

// Max/min over rows [r0, r1): best and at hold the row's current winners; the first edge's row is
// taken whole, every later one compared element by element without branches (wins(), the rule of
// core/extreme.h for a position that has a winner), which the compiler vectorizes.
template <typename scalar_t, bool kMax>
void extreme_rows_as(const RowsCall& c, int64_t r0, int64_t r1) {
  using acc_t = acc_type<scalar_t>;
  const int64_t dim = c.dim;
  std::vector<acc_t> best_buf(dim);
  acc_t* best = best_buf.data();
  scalar_t* out = static_cast<scalar_t*>(c.out);
  const scalar_t* local = static_cast<const scalar_t*>(c.local.table);
  const scalar_t* remote = static_cast<const scalar_t*>(c.remote.table);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t* at = c.arg + r * dim;
    bool first = true;
    auto visit = [&](const scalar_t* x, int64_t index) {
      if (first) {
        for (int64_t d = 0; d < dim; ++d) best[d] = static_cast<acc_t>(x[d]);
        std::fill(at, at + dim, index);
        first = false;
        return;
      }
      for (int64_t d = 0; d < dim; ++d) {
        const acc_t v = static_cast<acc_t>(x[d]);
        const bool take = wins(v, index, best[d], at[d], kMax);
        best[d] = take ? v : best[d];
        at[d] = take ? index : at[d];
      }
    };
    for (int64_t e = c.local.rowptr[r]; e < c.local.rowptr[r + 1]; ++e)
      visit(local + c.local.col[e] * dim, c.local.col[e]);
    if (c.remote.rowptr)
      for (int64_t e = c.remote.rowptr[r]; e < c.remote.rowptr[r + 1]; ++e)
        visit(remote + c.remote.col[e] * dim, c.remote_base + c.remote.col[e]);
    scalar_t* o = out + r * dim;
    if (first) {  // no in-edges: 0, and no source
      std::fill(o, o + dim, scalar_t(0));
      std::fill(at, at + dim, kNoArg);
    } else {
      for (int64_t d = 0; d < dim; ++d) o[d] = static_cast<scalar_t>(best[d]);
    }
  }
}

template <typename scalar_t>
void extreme_rows(const RowsCall& c, int64_t r0, int64_t r1) {
  if (c.is_max)
    extreme_rows_as<scalar_t, true>(c, r0, r1);
  else
    extreme_rows_as<scalar_t, false>(c, r0, r1);
}

template <template <typename> class Fn>
void by_dtype(const RowsCall& c, int64_t r0, int64_t r1) {
  switch (c.dtype) {
    case c10::ScalarType::Float:
      return Fn<float>::run(c, r0, r1);
    case c10::ScalarType::Double:
      return Fn<double>::run(c, r0, r1);
    case c10::ScalarType::Half:
      return Fn<c10::Half>::run(c, r0, r1);
    case c10::ScalarType::BFloat16:
      return Fn<c10::BFloat16>::run(c, r0, r1);
    default:
      TORCH_CHECK(false, "mgg: the CPU row kernels take float32, float64, float16 or bfloat16, not ", c.dtype);
  }
}

template <typename scalar_t>
struct Sum {
  static void run(const RowsCall& c, int64_t r0, int64_t r1) { sum_rows<scalar_t>(c, r0, r1); }
};
template <typename scalar_t>
struct Extreme {
  static void run(const RowsCall& c, int64_t r0, int64_t r1) { extreme_rows<scalar_t>(c, r0, r1); }
};

}  // namespace

extern const RowKernels kernels{MGG_ISA_NAME, &by_dtype<Sum>, &by_dtype<Extreme>};

}  // namespace mgg::cpu::MGG_ISA
