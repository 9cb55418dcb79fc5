// Native test of the plan executor (kernels/aggregate_core.h) without torch: a hand-made plan
// of a small weighted graph with local and remote parts, checked against a dense product, and
// split across column ranges as the CPU op splits it across threads.
#include <cmath>
#include <cstdio>
#include <vector>

#include "kernels/aggregate_core.h"

int main() {
  // rows 0..2; local sources 0..2, remote (halo) sources 0..1; D = 3
  // local edges: row0 <- {0 (w1), 2 (w2)}, row2 <- {1 (w0.5)}; remote: row0 <- {h1 (w3)}, row1 <- {h0 (w1)}
  std::vector<int64_t> lptr{0, 2, 3};  // partitions (ps = 2): [0,2) row 0, [2,3) row 2
  std::vector<int32_t> lrow{0, 2}, lcol{0, 2, 1};
  std::vector<double> lw{1, 2, 0.5};
  std::vector<int64_t> rptr{0, 1, 2};
  std::vector<int32_t> rrow{0, 1}, rcol{1, 0};
  std::vector<double> rw{3, 1};
  std::vector<int64_t> wl{0, 1, 2}, wr{0, 1, 2};  // dist = 1: two warps, one pair each
  std::vector<float> xl{1, 2, 3, 4, 5, 6, 7, 8, 9}, xr{10, 20, 30, 40, 50, 60};
  const int64_t D = 3;
  std::vector<double> want(9, 0.0);
  auto add = [&](int row, const float* x, double w) {
    for (int d = 0; d < D; ++d) want[row * D + d] += w * x[d];
  };
  add(0, &xl[0], 1); add(0, &xl[6], 2); add(2, &xl[3], 0.5); add(0, &xr[3], 3); add(1, &xr[0], 1);

  mgg::PlanPart<double> lp{lptr.data(), lrow.data(), lcol.data(), lw.data()};
  mgg::PlanPart<double> rp{rptr.data(), rrow.data(), rcol.data(), rw.data()};
  int failures = 0;
  for (int64_t split : {0, 1, 2, 3}) {  // columns [0, split) and [split, D) computed separately
    std::vector<double> acc(9, 0.0);
    mgg::execute_plan<float, double>(lp, xl.data(), rp, xr.data(), wl.data(), wr.data(), 2, D, acc.data(), 0, split);
    mgg::execute_plan<float, double>(lp, xl.data(), rp, xr.data(), wl.data(), wr.data(), 2, D, acc.data(), split, D);
    for (int i = 0; i < 9; ++i) {
      if (std::fabs(acc[i] - want[i]) > 1e-12) {
        std::printf("split %lld: out[%d] = %g, want %g\n", (long long)split, i, acc[i], want[i]);
        ++failures;
      }
    }
  }
  // unweighted parts read weight 1
  mgg::PlanPart<double> lu{lptr.data(), lrow.data(), lcol.data(), nullptr};
  mgg::PlanPart<double> none{rptr.data(), rrow.data(), rcol.data(), nullptr};
  std::vector<int64_t> wl1{0, 2}, wr0{0, 0};
  std::vector<double> acc(9, 0.0);
  mgg::execute_plan<float, double>(lu, xl.data(), none, xr.data(), wl1.data(), wr0.data(), 1, D, acc.data(), 0, D);
  if (acc[0] != 1 + 7 || acc[6] != 4) {
    std::printf("unweighted: out[0] = %g (want 8), out[6] = %g (want 4)\n", acc[0], acc[6]);
    ++failures;
  }
  std::printf("%d passed, %d failed\n", failures == 0 ? 5 : 0, failures);
  return failures == 0 ? 0 : 1;
}
