#include "sim/collective_fit.h"

#include <c10/util/Exception.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <utility>

namespace mfsdp {
namespace {

// Least squares of the relative error for t = sum_c coef[c] * x[c], over the columns in `use`,
// refitted without any negative coefficient but the last (the per-byte one, which must be
// positive). Returns the coefficients, or an empty vector when no positive per-byte fit exists.
std::vector<double> relative_least_squares(const std::vector<std::vector<double>>& xs, const std::vector<double>& t,
                                           std::vector<bool> use) {
  const size_t width = use.size();
  for (size_t attempt = 0; attempt < width; ++attempt) {
    std::vector<size_t> cols;
    for (size_t c = 0; c < width; ++c)
      if (use[c]) cols.push_back(c);
    const size_t m = cols.size();
    std::vector<std::vector<double>> A(m, std::vector<double>(m + 1, 0.0));
    for (size_t s = 0; s < t.size(); ++s) {  // relative residuals: the times span orders of magnitude
      const double w = 1.0 / (t[s] * t[s]);
      for (size_t i = 0; i < m; ++i) {
        for (size_t j = 0; j < m; ++j) A[i][j] += w * xs[s][cols[i]] * xs[s][cols[j]];
        A[i][m] += w * xs[s][cols[i]] * t[s];
      }
    }
    bool singular = false;
    for (size_t i = 0; i < m && !singular; ++i) {  // Gauss-Jordan on the normal equations
      size_t piv = i;
      for (size_t r = i + 1; r < m; ++r)
        if (std::fabs(A[r][i]) > std::fabs(A[piv][i])) piv = r;
      std::swap(A[i], A[piv]);
      if (!(std::fabs(A[i][i]) > 0)) singular = true;
      for (size_t r = 0; r < m && !singular; ++r) {
        if (r == i) continue;
        const double f = A[r][i] / A[i][i];
        for (size_t c = i; c <= m; ++c) A[r][c] -= f * A[i][c];
      }
    }
    if (singular) return {};
    std::vector<double> coef(width, 0.0);
    for (size_t i = 0; i < m; ++i) coef[cols[i]] = A[i][m] / A[i][i];
    bool negative = false;
    for (size_t c : cols)
      if (coef[c] < 0 && c + 1 != width) use[c] = false, negative = true;
    if (negative) continue;
    if (!(coef[width - 1] > 0)) return {};
    return coef;
  }
  return {};
}

// The hop column: the ring's steps of n ranks; none for all-to-all, whose one step folds into base.
double ring_steps(CollectiveKind kind, int n) {
  return kind == CollectiveKind::alltoall ? 0.0 : (kind == CollectiveKind::allreduce ? 2.0 : 1.0) * (n - 1);
}

}  // namespace

// The fit across world sizes, t = base + ring steps x hop + S g(n) / busbw (what a world size
// calibrate did not measure uses), and one per world size, t = latency + S g(n) / busbw.
CollectiveFit fit_collective(CollectiveKind kind, const std::vector<CollectiveSample>& samples) {
  std::vector<std::vector<double>> xs;
  std::vector<double> t;
  for (const CollectiveSample& s : samples) {
    xs.push_back({1.0, ring_steps(kind, s.ranks), s.bytes * collective_bandwidth_factor(kind, s.ranks)});
    t.push_back(s.seconds);
  }
  const std::vector<double> all = relative_least_squares(xs, t, {true, kind != CollectiveKind::alltoall, true});
  TORCH_CHECK(!all.empty(), "calibrate: the ", to_string(kind), " times do not grow with size; no fit (run on a quiet machine)");
  CollectiveFit f{true, all[0], all[1], 1.0 / all[2], {}};
  std::map<int, std::pair<std::vector<std::vector<double>>, std::vector<double>>> by_n;
  for (const CollectiveSample& s : samples) {
    by_n[s.ranks].first.push_back({1.0, s.bytes * collective_bandwidth_factor(kind, s.ranks)});
    by_n[s.ranks].second.push_back(s.seconds);
  }
  for (const auto& [n, data] : by_n) {
    const std::vector<double> one = relative_least_squares(data.first, data.second, {true, true});
    if (!one.empty()) f.at_ranks[n] = {one[0], 1.0 / one[1]};  // else the fit across world sizes prices n
  }
  return f;
}

double modelled_seconds(CollectiveKind kind, const CollectiveSample& s, const HardwareProfile& p) {
  std::vector<int> group(s.ranks);
  std::iota(group.begin(), group.end(), 0);
  return collective_seconds(CollectiveCall{kind, group, static_cast<int64_t>(s.bytes)}, p);
}

}  // namespace mfsdp
