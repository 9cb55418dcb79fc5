// Native test of mgg's torch-free core: the block scheduler (core/block_schedule.h), the walk
// over it (core/schedule.h) and the CPU executor (core/executor.h). A small weighted step with
// local and remote parts is scheduled under many (ps, dist, wpb), so that rows are packed, cut
// across blocks and fixed up; the schedule's invariants are checked, and every execution
// (column splits as the CPU op splits them across threads, table and peer sources, the
// deterministic row order) is compared with a dense product.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/block_schedule.h"
#include "core/executor.h"
#include "core/launch_shape.h"

namespace {

int failures = 0, checks = 0;
// Every output starts as NaN, so an element an execution fails to write is seen.
const double kPoison = std::nan("");

void poison(std::vector<double>& out) { std::fill(out.begin(), out.end(), kPoison); }

void expect(bool ok, const char* what, long long a = 0, long long b = 0) {
  ++checks;
  if (!ok) {
    std::printf("FAILED: %s (%lld, %lld)\n", what, a, b);
    ++failures;
  }
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, const char* what) {
  ++checks;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= 1e-12)) {  // a NaN (a row never written) fails
      std::printf("FAILED: %s: out[%zu] = %g, want %g\n", what, i, got[i], want[i]);
      ++failures;
      return;
    }
  }
}

// Every partition of both parts is walked exactly once, by the block whose rows hold it, and
// every output row is written once (by a block or by its fixup).
void check_schedule(const mgg::BlockSchedule& s, const std::vector<int64_t>& lptr, const std::vector<int64_t>& rptr,
                    int64_t rows, int64_t ps, int64_t dist, int64_t wpb) {
  const int64_t nb = static_cast<int64_t>(s.blocks.size()) / mgg::kBlockFields;
  std::vector<int> edge_seen_l(lptr.back(), 0), edge_seen_r(rptr.back(), 0), written(rows, 0);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t* blk = &s.blocks[b * mgg::kBlockFields];
    const int64_t n = blk[mgg::kRowEnd] - blk[mgg::kRowBegin];
    expect(n >= 1 && n <= mgg::block_row_cap(wpb), "block row count", b, n);
    expect(blk[mgg::kLocalEnd] - blk[mgg::kLocalBegin] <= wpb * dist, "local partitions per block", b);
    expect(blk[mgg::kRemoteEnd] - blk[mgg::kRemoteBegin] <= wpb * dist, "remote partitions per block", b);
    if (blk[mgg::kScratch] < 0) {
      for (int64_t r = blk[mgg::kRowBegin]; r < blk[mgg::kRowEnd]; ++r) ++written[r];
    } else {
      expect(n == 1, "a scratch block owns one row", b, n);
    }
    for (int64_t w = 0; w < wpb; ++w) {
      for (bool remote : {false, true}) {
        const auto& ptr = remote ? rptr : lptr;
        auto& seen = remote ? edge_seen_r : edge_seen_l;
        mgg::PartWalk walk = mgg::warp_walk(blk, remote, ptr.data(), ps, dist, w);
        while (!walk.done()) {
          const mgg::Partition p = walk.next(ptr.data(), ps);
          expect(p.row >= blk[mgg::kRowBegin] && p.row < blk[mgg::kRowEnd], "partition row inside its block", b, p.row);
          expect(p.begin >= ptr[p.row] && p.end <= ptr[p.row + 1] && p.end > p.begin, "partition inside its row",
                 p.begin, p.end);
          expect(ps == 0 || p.end - p.begin <= ps, "partition size <= ps", p.end - p.begin, ps);
          for (int64_t e = p.begin; e < p.end; ++e) ++seen[e];
        }
      }
    }
  }
  for (size_t f = 0; f < s.fixups.size(); f += mgg::kFixupFields) ++written[s.fixups[f + mgg::kFixRow]];
  for (int v : edge_seen_l) expect(v == 1, "every local edge walked once", v);
  for (int v : edge_seen_r) expect(v == 1, "every remote edge walked once", v);
  for (int v : written) expect(v == 1, "every row written once", v);
}

}  // namespace

int main() {
  // Output rows 0..3; local sources 0..2 (a table of 3 rows), remote sources: PE 1, rows 0..1.
  // local:  row0 <- {0 (w1), 2 (w2), 1 (w1), 0 (w0.25), 2 (w1)}, row2 <- {1 (w0.5)}, row3 <- {}
  // remote: row0 <- {h1 (w3)}, row1 <- {h0 (w1), h1 (w2)}
  const std::vector<int64_t> lptr{0, 5, 5, 6, 6};
  const std::vector<int32_t> lcol{0, 2, 1, 0, 2, 1};
  const std::vector<double> lw{1, 2, 1, 0.25, 1, 0.5};
  const std::vector<int64_t> rptr{0, 1, 3, 3, 3};
  const std::vector<int32_t> rcol{1, 0, 1}, rpe{1, 1, 1};
  const std::vector<double> rw{3, 1, 2};
  const std::vector<float> xl{1, 2, 3, 4, 5, 6, 7, 8, 9}, xr{10, 20, 30, 40, 50, 60};
  const int64_t D = 3, rows = 4;
  std::vector<double> want(rows * D, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t e = lptr[r]; e < lptr[r + 1]; ++e)
      for (int d = 0; d < D; ++d) want[r * D + d] += lw[e] * xl[lcol[e] * D + d];
    for (int64_t e = rptr[r]; e < rptr[r + 1]; ++e)
      for (int d = 0; d < D; ++d) want[r * D + d] += rw[e] * xr[rcol[e] * D + d];
  }

  const mgg::PlanPart<double> lp{lptr.data(), lcol.data(), lw.data(), nullptr};
  const mgg::PlanPart<double> rp{rptr.data(), rcol.data(), rw.data(), nullptr};
  const mgg::PlanPart<double> rp_peer{rptr.data(), rcol.data(), rw.data(), rpe.data()};
  const mgg::TableSource<float> lsrc{xl.data(), D}, rsrc{xr.data(), D};
  const void* peers[2] = {xl.data(), xr.data()};
  const mgg::PeerSource<float> psrc{peers, D};

  int cut_cases = 0;
  for (int64_t ps : {0, 1, 2, 3, 8}) {
    for (int64_t wpb : {1, 2}) {
      for (int64_t dist : {1, 2, 4}) {
        const auto s = mgg::build_block_schedule(lptr.data(), rptr.data(), rows, ps, wpb * dist, 2 * wpb);
        check_schedule(s, lptr, rptr, rows, ps, dist, wpb);
        const int64_t nf = static_cast<int64_t>(s.fixups.size()) / mgg::kFixupFields;
        cut_cases += nf > 0;
        expect((nf > 0) == (mgg::num_parts(5, ps) > wpb * dist), "row 0 is cut exactly when it does not fit", ps,
               wpb * dist);
        for (bool interleave : {true, false}) {
          const mgg::Schedule sch{s.blocks.data(),
                                  static_cast<int64_t>(s.blocks.size()) / mgg::kBlockFields,
                                  s.fixups.data(),
                                  nf,
                                  ps,
                                  dist,
                                  wpb,
                                  interleave};
          std::vector<double> scratch(s.num_slots * D), slots(2 * wpb * D);
          for (int64_t split : {0, 1, 2, 3}) {           // columns [0, split) and [split, D) computed separately
            std::vector<double> out(rows * D, kPoison);  // every element must be written
            mgg::execute_blocks<float, double>(lp, lsrc, rp, rsrc, sch, D, out.data(), scratch.data(), slots.data(), 0,
                                               split);
            mgg::execute_blocks<float, double>(lp, lsrc, rp, rsrc, sch, D, out.data(), scratch.data(), slots.data(),
                                               split, D);
            expect_near(out, want, "blocks, table sources");
          }
          std::vector<double> out(rows * D, kPoison);
          mgg::execute_blocks<float, double>(lp, lsrc, rp_peer, psrc, sch, D, out.data(), scratch.data(), slots.data(),
                                             0, D);
          expect_near(out, want, "blocks, peer sources");
        }
      }
    }
  }
  expect(cut_cases > 0, "some cases cut a row across blocks", cut_cases);
  std::vector<double> out(rows * D, kPoison), partial(D);
  mgg::execute_rows<float, double>(lp, lsrc, rp, rsrc, rows, D, out.data(), partial.data(), 0, D);
  expect_near(out, want, "rows (deterministic order)");
  const mgg::PlanPart<double> none{nullptr, nullptr, nullptr, nullptr};
  std::vector<double> local_only(rows * D, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = lptr[r]; e < lptr[r + 1]; ++e)
      for (int d = 0; d < D; ++d) local_only[r * D + d] += lw[e] * xl[lcol[e] * D + d];
  poison(out);
  mgg::execute_rows<float, double>(lp, lsrc, none, rsrc, rows, D, out.data(), partial.data(), 0, D);
  expect_near(out, local_only, "rows without a remote part");
  const auto s = mgg::build_block_schedule(lptr.data(), nullptr, rows, 2, 2, 2);
  const mgg::Schedule sch{s.blocks.data(),
                          static_cast<int64_t>(s.blocks.size()) / mgg::kBlockFields,
                          s.fixups.data(),
                          static_cast<int64_t>(s.fixups.size()) / mgg::kFixupFields,
                          2,
                          2,
                          1,
                          true};
  std::vector<double> scratch(s.num_slots * D), slots(2 * D);
  poison(out);
  mgg::execute_blocks<float, double>(lp, lsrc, none, rsrc, sch, D, out.data(), scratch.data(), slots.data(), 0, D);
  expect_near(out, local_only, "blocks without a remote part");

  // launch shape: tiles narrow until shared memory fits, and report 0 when nothing fits
  expect(mgg::choose_tile(2100, 4, 0, 4, false, 227 * 1024) == 128, "widest fp32 tile when it fits: 16 bytes a lane");
  expect(mgg::choose_tile(2100, 4, 0, 2, false, 227 * 1024) == 256, "widest fp16 tile when it fits: 16 bytes a lane");
  expect(mgg::max_tile_columns(2) == mgg::kMaxTile, "the fp16/bf16 slice is the widest");
  expect(mgg::choose_tile(20, 4, 0, 4, false, 227 * 1024) == 32, "one 32-column tile for D <= 32");
  const int t = mgg::choose_tile(2100, 16, 32, 4, false, 100 * 1024);
  expect(t >= 32 && t < mgg::kMaxTile && mgg::smem_bytes(16, t, 32, 4, false) <= 100 * 1024, "narrowed tile", t);
  expect(mgg::choose_tile(2100, 16, 32, 4, false, 1024) == 0, "no tile fits 1 KiB");
  std::printf("%d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
