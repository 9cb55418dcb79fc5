// Native test of mgg's torch-free core: the range scheduler (core/range_schedule.h, layout in
// core/schedule.h), its replay (core/executor.h) and the CPU's row ranges (core/row_ranges.h).
// A small weighted step with local and remote parts is scheduled under many (ps, dist), so that
// rows are packed, cut across warps and fixed up, and a hub row spans several warps; the
// schedule's invariants are checked, and every replay (column splits, table and peer sources) is
// compared with a dense product.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/executor.h"
#include "core/launch_shape.h"
#include "core/range_schedule.h"
#include "core/reuse_distance.h"
#include "core/row_ranges.h"

namespace {

int failures = 0, checks = 0;
// Every output starts as NaN, so an element an execution fails to write is seen.
const double kPoison = std::nan("");

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

// Every edge of both parts lies in exactly one warp's range, warps hold at most ps * dist items
// (whole rows with ps = 0), every output row is written once (by the warp that ends it or by its
// fixup), and each carry slot is written by exactly one warp, for its fixup's row.
void check_schedule(const mgg::RangeSchedule& s, const std::vector<int64_t>& lptr, const std::vector<int64_t>& rptr,
                    int64_t rows, int64_t ps, int64_t dist) {
  const int64_t nw = s.num_warps;
  expect(static_cast<int64_t>(s.ranges.size()) == (nw + 1) * mgg::kRangeFields, "one record per warp and an end");
  const int64_t* end = &s.ranges[nw * mgg::kRangeFields];
  expect(end[mgg::kRangeRow] == rows && end[mgg::kRangeLocal] == lptr.back() && end[mgg::kRangeRemote] == rptr.back(),
         "the end record is (rows, local edges, remote edges)");
  std::vector<int> written(rows, 0), slot_writes(s.num_slots, 0);
  std::vector<int64_t> slot_row(s.num_slots, -1);
  for (size_t f = 0; f < s.fixups.size(); f += mgg::kFixupFields) {
    ++written[s.fixups[f + mgg::kFixRow]];
    for (int64_t j = s.fixups[f + mgg::kFixBegin]; j < s.fixups[f + mgg::kFixEnd]; ++j)
      slot_row[j] = s.fixups[f + mgg::kFixRow];
  }
  for (int64_t w = 0; w < nw; ++w) {
    const int64_t* a = &s.ranges[w * mgg::kRangeFields];
    const int64_t* b = a + mgg::kRangeFields;
    expect(a[mgg::kRangeRow] <= b[mgg::kRangeRow] && a[mgg::kRangeLocal] <= b[mgg::kRangeLocal] &&
               a[mgg::kRangeRemote] <= b[mgg::kRangeRemote],
           "records rise", w);
    const int64_t items = (b[mgg::kRangeLocal] - a[mgg::kRangeLocal]) + (b[mgg::kRangeRemote] - a[mgg::kRangeRemote]) +
                          (b[mgg::kRangeRow] - a[mgg::kRangeRow]);
    if (ps == 0) {
      expect(b[mgg::kRangeRow] - a[mgg::kRangeRow] <= dist && a[mgg::kRangeLocal] == lptr[a[mgg::kRangeRow]],
             "whole rows, at most dist of them", w);
    } else {
      expect(items == ps * dist || (w == nw - 1 && items <= ps * dist && items > 0), "ps * dist items a warp", w,
             items);
    }
    for (int64_t r = a[mgg::kRangeRow]; r < b[mgg::kRangeRow]; ++r) {
      const bool split = r == a[mgg::kRangeRow] && a[mgg::kRangeHead] >= 0;
      if (!split) ++written[r];
    }
    if (a[mgg::kRangeHead] >= 0) {
      ++slot_writes[a[mgg::kRangeHead]];
      expect(slot_row[a[mgg::kRangeHead]] == a[mgg::kRangeRow], "head slot of its row's fixup", w);
    }
    if (a[mgg::kRangeTail] >= 0) {
      ++slot_writes[a[mgg::kRangeTail]];
      expect(slot_row[a[mgg::kRangeTail]] == b[mgg::kRangeRow], "tail slot of the next warp's first row", w);
    }
  }
  for (int v : written) expect(v == 1, "every row written once", v);
  for (int v : slot_writes) expect(v == 1, "every carry slot written by one warp", v);
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
    for (int64_t dist : {1, 2, 3, 4, 7}) {
      const auto s = mgg::build_range_schedule(lptr.data(), rptr.data(), rows, ps, dist);
      check_schedule(s, lptr, rptr, rows, ps, dist);
      const int64_t nf = static_cast<int64_t>(s.fixups.size()) / mgg::kFixupFields;
      cut_cases += nf > 0;
      if (ps == 0) expect(nf == 0, "whole rows: nothing to fix up", dist, nf);
      const mgg::Schedule sch{s.ranges.data(), s.num_warps, s.fixups.data(), nf};
      std::vector<double> carry(s.num_slots * D), sum(D);
      for (int64_t split : {0, 1, 2, 3}) {           // columns [0, split) and [split, D) computed separately
        std::vector<double> out(rows * D, kPoison);  // every element must be written
        mgg::execute_ranges<float, double>(lp, lsrc, rp, rsrc, sch, D, out.data(), carry.data(), sum.data(), 0, split);
        mgg::execute_ranges<float, double>(lp, lsrc, rp, rsrc, sch, D, out.data(), carry.data(), sum.data(), split, D);
        expect_near(out, want, "ranges, table sources");
      }
      std::vector<double> out(rows * D, kPoison);
      mgg::execute_ranges<float, double>(lp, lsrc, rp_peer, psrc, sch, D, out.data(), carry.data(), sum.data(), 0, D);
      expect_near(out, want, "ranges, peer sources");
    }
  }
  expect(cut_cases > 0, "some cases cut a row across warps", cut_cases);
  // A hub row across several warps: ps * dist = 2 items a warp over row 0's 6 edges and its end.
  const auto hub = mgg::build_range_schedule(lptr.data(), rptr.data(), rows, 1, 2);
  expect(hub.fixups.size() >= mgg::kFixupFields && hub.fixups[mgg::kFixRow] == 0 &&
             hub.fixups[mgg::kFixEnd] - hub.fixups[mgg::kFixBegin] >= 3,
         "row 0 is summed from three or more warps");
  const mgg::PlanPart<double> none{nullptr, nullptr, nullptr, nullptr};
  std::vector<double> local_only(rows * D, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = lptr[r]; e < lptr[r + 1]; ++e)
      for (int d = 0; d < D; ++d) local_only[r * D + d] += lw[e] * xl[lcol[e] * D + d];
  const auto s = mgg::build_range_schedule(lptr.data(), nullptr, rows, 2, 2);
  const mgg::Schedule sch{s.ranges.data(), s.num_warps, s.fixups.data(),
                          static_cast<int64_t>(s.fixups.size()) / mgg::kFixupFields};
  std::vector<double> out(rows * D, kPoison), carry(s.num_slots * D), sum(D);
  mgg::execute_ranges<float, double>(lp, lsrc, none, rsrc, sch, D, out.data(), carry.data(), sum.data(), 0, D);
  expect_near(out, local_only, "ranges without a remote part");
  const std::vector<int64_t> empty{0, 0, 0};
  expect(mgg::build_range_schedule(empty.data(), nullptr, 2, 4, 4).num_warps == 1, "empty rows: one warp writes them");

  // launch shape: tiles narrow until shared memory fits, and report 0 when nothing fits
  expect(mgg::choose_tile(2100, 4, 0, 4, 227 * 1024) == mgg::kMaxTile, "widest fp32 pass when it fits: 8 a lane");
  expect(mgg::choose_tile(2100, 4, 0, 2, 227 * 1024) == mgg::kMaxTile, "widest fp16 pass when it fits");
  expect(mgg::choose_tile(20, 4, 0, 4, 227 * 1024) == 32, "one 32-column pass for D <= 32");
  const int t = mgg::choose_tile(2100, 8, 32, 4, 100 * 1024);
  expect(t >= 32 && t < mgg::kMaxTile && mgg::smem_bytes(8, t, 32, 4) <= 100 * 1024, "narrowed pass", t);
  expect(mgg::choose_tile(2100, 16, 32, 4, 1024) == 0, "no pass fits 1 KiB");
  expect(mgg::landing_rows_for(16, 5) == 5 && mgg::landing_rows_for(0, 100) == mgg::kChunk &&
             mgg::landing_rows_for(8, 0) == 1,
         "landing rows: ps, at most the remote edges, at least 1");
  // reuse distances against their definition: distinct other units strictly between two accesses
  {
    uint64_t rng = 12345;
    std::vector<int64_t> trace(400);
    for (auto& u : trace) {
      rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
      u = static_cast<int64_t>((rng >> 33) % 23);
    }
    std::vector<int64_t> distinct(trace.size()), gap(trace.size());
    mgg::reuse_distances(trace.data(), static_cast<int64_t>(trace.size()), 23, distinct.data(), gap.data());
    int wrong = 0;
    for (size_t t = 0; t < trace.size(); ++t) {
      int64_t p = -1;
      for (size_t j = t; j-- > 0;)
        if (trace[j] == trace[t]) {
          p = static_cast<int64_t>(j);
          break;
        }
      std::vector<int64_t> seen;
      for (int64_t j = p + 1; p >= 0 && j < static_cast<int64_t>(t); ++j)
        if (std::find(seen.begin(), seen.end(), trace[j]) == seen.end()) seen.push_back(trace[j]);
      const int64_t want_d = p < 0 ? -1 : static_cast<int64_t>(seen.size());
      const int64_t want_g = p < 0 ? -1 : static_cast<int64_t>(t) - p - 1;
      wrong += distinct[t] != want_d || gap[t] != want_g;
    }
    expect(wrong == 0, "reuse distances: distinct units and gap between two accesses of a unit", wrong);
    const int64_t bad[2] = {0, 5};
    bool refused = false;
    try {
      mgg::reuse_distances(bad, 2, 5, distinct.data(), gap.data());
    } catch (const std::invalid_argument&) {
      refused = true;
    }
    expect(refused, "reuse distances: a unit outside [0, units) is refused");
  }
  {  // the CPU's share-out of rows (core/row_ranges.h): whole rows, in order, balanced by work
    std::vector<int64_t> local{0}, remote{0};
    for (int64_t r = 0; r < 500; ++r) {  // a hub, empty rows, and rows of 1-9 edges
      local.push_back(local.back() + (r == 7 ? 3000 : r % 13 == 0 ? 0 : r % 9 + 1));
      remote.push_back(remote.back() + (r % 5 == 0 ? 2 : 0));
    }
    const int64_t rows = 500, total = mgg::work_before(local.data(), remote.data(), rows);
    int64_t heaviest = 0;
    for (int64_t r = 0; r < rows; ++r)
      heaviest = std::max(heaviest, mgg::work_before(local.data(), remote.data(), r + 1) -
                                        mgg::work_before(local.data(), remote.data(), r));
    for (int64_t parts : {1, 2, 3, 7, 64, 499, 500, 777}) {
      std::vector<int64_t> b(parts + 1, -1);
      mgg::balanced_row_bounds(local.data(), remote.data(), rows, parts, b.data());
      bool ordered = b[0] == 0 && b[parts] == rows, balanced = true;
      for (int64_t k = 0; k < parts; ++k) {
        ordered = ordered && b[k] <= b[k + 1];
        const int64_t w = mgg::work_before(local.data(), remote.data(), b[k + 1]) -
                          mgg::work_before(local.data(), remote.data(), b[k]);
        balanced = balanced && w <= total / parts + heaviest;
      }
      expect(ordered, "row ranges start at 0, end at the last row and never go back", parts);
      expect(balanced, "no row range holds more than its share plus the heaviest row", parts);
    }
    std::vector<int64_t> b(3);
    mgg::balanced_row_bounds(local.data(), nullptr, rows, 2, b.data());
    expect(b[1] > 7 && b[1] < rows, "the hub's work pushes the cut past it", b[1]);
  }
  std::printf("%d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
