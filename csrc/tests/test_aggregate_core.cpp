// Native test of the plan executor (kernels/aggregate_core.h) and the block scheduler
// (plan/block_schedule.h) without torch: a hand-made plan of a small weighted graph with local
// and remote parts, scheduled with several caps (so that rows are packed, cut across blocks and
// fixed up), checked against a dense product, and split across column ranges as the CPU op
// splits it across threads; and the same with peer sources.
#include <cmath>
#include <cstdio>
#include <vector>

#include "kernels/aggregate_core.h"
#include "plan/block_schedule.h"

namespace {

int failures = 0, checks = 0;

void expect_near(const std::vector<double>& got, const std::vector<double>& want, const char* what) {
  ++checks;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > 1e-12) {
      std::printf("%s: out[%zu] = %g, want %g\n", what, i, got[i], want[i]);
      ++failures;
      return;
    }
  }
}

}  // namespace

int main() {
  // rows 0..2; local sources 0..2, remote sources: PE 1 rows 0..1; D = 3
  // local: row0 <- {0 (w1), 2 (w2), 1 (w1)}, row2 <- {1 (w0.5)};  remote: row0 <- {h1 (w3)}, row1 <- {h0 (w1)}
  // partitions with ps = 1: local row 0 has 3 partitions, so caps of 1 or 2 cut it across blocks.
  std::vector<int64_t> lptr{0, 1, 2, 3, 4};
  std::vector<int32_t> lrow{0, 0, 0, 2}, lcol{0, 2, 1, 1};
  std::vector<double> lw{1, 2, 1, 0.5};
  std::vector<int64_t> rptr{0, 1, 2};
  std::vector<int32_t> rrow{0, 1}, rcol{1, 0}, rpe{1, 1};
  std::vector<double> rw{3, 1};
  std::vector<float> xl{1, 2, 3, 4, 5, 6, 7, 8, 9}, xr{10, 20, 30, 40, 50, 60};
  const int64_t D = 3, rows = 3;
  std::vector<double> want(9, 0.0);
  auto add = [&](int row, const float* x, double w) {
    for (int d = 0; d < D; ++d) want[row * D + d] += w * x[d];
  };
  add(0, &xl[0], 1); add(0, &xl[6], 2); add(0, &xl[3], 1); add(2, &xl[3], 0.5); add(0, &xr[3], 3); add(1, &xr[0], 1);

  const std::vector<int64_t> local_parts{3, 0, 1}, remote_parts{1, 1, 0};
  mgg::PlanPart<double> lp{lptr.data(), lrow.data(), lcol.data(), lw.data(), nullptr};
  mgg::PlanPart<double> rp{rptr.data(), rrow.data(), rcol.data(), rw.data(), nullptr};
  mgg::PlanPart<double> rp_peer{rptr.data(), rrow.data(), rcol.data(), rw.data(), rpe.data()};
  const mgg::TableSource<float> lsrc{xl.data(), D}, rsrc{xr.data(), D};
  const void* peers[2] = {xl.data(), xr.data()};
  const mgg::PeerSource<float> psrc{peers, D};

  for (int64_t wpb : {1, 2}) {
    for (int64_t dist : {1, 2, 4}) {
      const auto s = mgg::build_block_schedule(local_parts.data(), remote_parts.data(), rows, wpb * dist, 2 * wpb);
      const mgg::Schedule sch{s.blocks.data(), static_cast<int64_t>(s.blocks.size()) / mgg::kBlockFields,
                              s.fixups.data(), static_cast<int64_t>(s.fixups.size()) / mgg::kFixupFields, dist, wpb,
                              true};
      const bool cut = wpb * dist < 3;
      ++checks;
      if ((sch.num_fixups == 1) != cut) {
        std::printf("wpb %lld dist %lld: %lld fixups\n", (long long)wpb, (long long)dist, (long long)sch.num_fixups);
        ++failures;
      }
      std::vector<double> scratch(9 * D), slots(2 * wpb * D);
      for (int64_t split : {0, 1, 2, 3}) {  // columns [0, split) and [split, D) computed separately
        std::vector<double> out(9, -1.0);   // every element must be written
        mgg::execute_blocks<float, double>(lp, lsrc, rp, rsrc, sch, D, out.data(), scratch.data(), slots.data(), 0, split);
        mgg::execute_blocks<float, double>(lp, lsrc, rp, rsrc, sch, D, out.data(), scratch.data(), slots.data(), split, D);
        expect_near(out, want, "blocks, table source");
      }
      std::vector<double> out(9, -1.0);
      mgg::execute_blocks<float, double>(lp, lsrc, rp_peer, psrc, sch, D, out.data(), scratch.data(), slots.data(), 0, D);
      expect_near(out, want, "blocks, peer source");
    }
  }
  std::vector<double> out(9, -1.0), partial(D);
  mgg::execute_rows<float, double>(lp, 4, lsrc, rp, 2, rsrc, rows, D, out.data(), partial.data(), 0, D);
  expect_near(out, want, "rows (deterministic order)");
  std::printf("%d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
