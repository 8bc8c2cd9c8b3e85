#include "core/plan/optimizer_cost.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace mfsdp {
namespace {

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Block sizes of one dimension cut into pieces of at most `max_dim`.
std::vector<int64_t> blocks(int64_t dim, int64_t max_dim) {
  std::vector<int64_t> out;
  for (int64_t start = 0; start < dim; start += max_dim) out.push_back(std::min(max_dim, dim - start));
  return out;
}

void check_matrix(OptimizerKind kind, int64_t rows, int64_t cols) {
  TORCH_CHECK(rows > 0 && cols > 0, to_string(kind), ": needs a non-empty 2-D tensor, got ", rows, "x", cols);
}

}  // namespace

double optimizer_step_cost(OptimizerKind kind, int64_t rows, int64_t cols, const OptimizerCostConfig& c) {
  const double m = static_cast<double>(rows), n = static_cast<double>(cols);
  switch (kind) {
    case OptimizerKind::adamw:
      return m * n;
    case OptimizerKind::normuon:  // + the row second moment, the division and the two norms
    case OptimizerKind::adamuon:  // + the elementwise second moment, the division and the norm
    case OptimizerKind::muon: {
      check_matrix(kind, rows, cols);
      const double extra = kind == OptimizerKind::muon ? 0 : 4 * m * n;
      return ns_multiply_adds(ns_variant_info(c.ns_variant), c.ns_steps, rows, cols) + m * n + extra;
    }
    case OptimizerKind::shampoo: {
      check_matrix(kind, rows, cols);
      double cost = 0;
      for (int64_t bm : blocks(rows, c.shampoo_max_preconditioner_dim)) {
        for (int64_t bn : blocks(cols, c.shampoo_max_preconditioner_dim)) {
          const double x = static_cast<double>(bm), y = static_cast<double>(bn);
          cost += 2 * (x * x * y + x * y * y) + (x * x * x + y * y * y) / c.shampoo_precondition_frequency;
        }
      }
      return cost;
    }
    case OptimizerKind::soap: {
      check_matrix(kind, rows, cols);
      const double left = rows <= c.soap_max_precond_dim ? m : 0;
      const double right = cols <= c.soap_max_precond_dim ? n : 0;
      return 3 * (left * left * n + m * right * right) +
             (left * left * left + right * right * right) / c.soap_precondition_frequency + m * n;
    }
  }
  TORCH_INTERNAL_ASSERT(false, "unknown OptimizerKind");
}

int64_t optimizer_state_elements(OptimizerKind kind, const std::vector<int64_t>& shape,
                                 const OptimizerCostConfig& c) {
  if (kind == OptimizerKind::adamw) return 2 * numel(shape);
  TORCH_CHECK(shape.size() == 2, to_string(kind), ": needs a 2-D tensor, got ", shape.size(), " dimensions");
  const int64_t rows = shape[0], cols = shape[1];
  check_matrix(kind, rows, cols);
  switch (kind) {
    case OptimizerKind::muon:
      return rows * cols;
    case OptimizerKind::normuon:
      return rows * cols + rows;
    case OptimizerKind::adamuon:
      return 2 * rows * cols;
    case OptimizerKind::shampoo: {
      int64_t state = 0;
      for (int64_t bm : blocks(rows, c.shampoo_max_preconditioner_dim)) {
        for (int64_t bn : blocks(cols, c.shampoo_max_preconditioner_dim)) {
          state += 2 * (bm * bm + bn * bn) + bm * bn * (c.shampoo_adam_grafting ? 2 : 1);
        }
      }
      return state;
    }
    case OptimizerKind::soap: {
      const int64_t left = rows <= c.soap_max_precond_dim ? rows : 0;
      const int64_t right = cols <= c.soap_max_precond_dim ? cols : 0;
      return 2 * rows * cols + 2 * (left * left + right * right);
    }
    case OptimizerKind::adamw: break;
  }
  TORCH_INTERNAL_ASSERT(false, "unreachable");
}

}  // namespace mfsdp
