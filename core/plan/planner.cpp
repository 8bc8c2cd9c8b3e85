#include "core/plan/planner.h"

#include <c10/util/Exception.h>

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

namespace mfsdp {
namespace {

int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

// Items in LPT order: heaviest first by `weight`, ties by key.
std::vector<int> lpt_order(const std::vector<PlanItem>& items, const std::vector<double>& weight) {
  std::vector<int> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    if (weight[a] != weight[b]) return weight[a] > weight[b];
    return items[a].key < items[b].key;
  });
  return order;
}

// Longest-processing-time list scheduling on one objective: each item to the least-loaded rank.
std::vector<int> greedy(const std::vector<PlanItem>& items, int W, bool by_cost) {
  std::vector<double> weight;
  for (const auto& it : items) weight.push_back(by_cost ? it.cost : it.bytes);
  std::vector<int> owner(items.size(), 0);
  std::vector<double> load(W, 0.0);
  for (int i : lpt_order(items, weight)) {
    int best = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = best;
    load[best] += weight[i];
  }
  return owner;
}

// Both objectives at once. A rank's load is F_r = max(B_r / mean B, C_r / mean C); items go in LPT
// order of their own normalised size to the rank that keeps F smallest, preferring ranks holding
// fewer items of the same unit (so a unit's unshard traffic comes from many senders). Then local
// search: moves and swaps off the most loaded rank while they lower its load.
std::vector<int> balanced(const std::vector<PlanItem>& items, int W) {
  const size_t n = items.size();
  double total_b = 0, total_c = 0;
  for (const auto& it : items) {
    total_b += it.bytes;
    total_c += it.cost;
  }
  const double mean_b = total_b > 0 ? total_b / W : 1.0, mean_c = total_c > 0 ? total_c / W : 1.0;
  std::vector<double> nb(n), nc(n), size(n);
  int units = 0;
  for (size_t i = 0; i < n; ++i) {
    nb[i] = items[i].bytes / mean_b;
    nc[i] = items[i].cost / mean_c;
    size[i] = std::max(nb[i], nc[i]);
    units = std::max(units, items[i].unit + 1);
  }
  std::vector<double> lb(W, 0.0), lc(W, 0.0);
  std::vector<std::vector<int>> per_unit(units, std::vector<int>(W, 0));
  std::vector<int> owner(n, 0);
  for (int i : lpt_order(items, size)) {
    int best = 0;
    double best_score = 0;
    int best_same = 0;
    for (int r = 0; r < W; ++r) {
      double score = std::max(lb[r] + nb[i], lc[r] + nc[i]);
      int same = per_unit[items[i].unit][r];
      // Scores within 1e-9 are a tie; then fewer same-unit items wins, then the lower rank.
      if (r == 0 || score < best_score - 1e-9 || (score <= best_score + 1e-9 && same < best_same)) {
        best = r;
        best_score = score;
        best_same = same;
      }
    }
    owner[i] = best;
    lb[best] += nb[i];
    lc[best] += nc[i];
    ++per_unit[items[i].unit][best];
  }
  if (W == 1) return owner;
  auto load = [&](int r) { return std::max(lb[r], lc[r]); };
  std::vector<std::vector<int>> on(W);
  for (size_t i = 0; i < n; ++i) on[owner[i]].push_back(static_cast<int>(i));
  for (int iter = 0; iter < 4 * static_cast<int>(n) + 16; ++iter) {
    int hot = 0;
    for (int r = 1; r < W; ++r)
      if (load(r) > load(hot) + 1e-12) hot = r;
    const double before = load(hot);
    double best_gain = 1e-9;
    int best_i = -1, best_j = -1, best_r = -1;
    for (int i : on[hot]) {
      for (int r = 0; r < W; ++r) {
        if (r == hot) continue;
        // Move i: hot -> r.
        double after = std::max(std::max(lb[hot] - nb[i], lc[hot] - nc[i]), std::max(lb[r] + nb[i], lc[r] + nc[i]));
        if (before - after > best_gain) {
          best_gain = before - after;
          best_i = i, best_j = -1, best_r = r;
        }
        // Swap i with j on r.
        for (int j : on[r]) {
          double db = nb[i] - nb[j], dc = nc[i] - nc[j];
          if (db <= 0 && dc <= 0) continue;
          double a = std::max(std::max(lb[hot] - db, lc[hot] - dc), std::max(lb[r] + db, lc[r] + dc));
          if (before - a > best_gain) {
            best_gain = before - a;
            best_i = i, best_j = j, best_r = r;
          }
        }
      }
    }
    if (best_i < 0) break;
    auto move = [&](int item, int from, int to) {
      lb[from] -= nb[item], lc[from] -= nc[item];
      lb[to] += nb[item], lc[to] += nc[item];
      owner[item] = to;
      on[from].erase(std::find(on[from].begin(), on[from].end(), item));
      on[to].push_back(item);
    };
    move(best_i, hot, best_r);
    if (best_j >= 0) move(best_j, best_r, hot);
  }
  return owner;
}

}  // namespace

Role role_of(const ParamSpec& p, const PlannerOptions& options) {
  for (const auto& rule : options.rules) {
    if (fnmatch(rule.pattern.c_str(), p.name.c_str(), 0) == 0) {
      TORCH_CHECK(rule.role != Role::owned_matrix || p.shape.size() == 2, "planner: rule '", rule.pattern,
                  "' makes '", p.name, "' an owned matrix but it is ", p.shape.size(), "-D");
      TORCH_CHECK(rule.role != Role::expert_range || p.kind == ParamKind::expert_matrix, "planner: rule '",
                  rule.pattern, "' cuts '", p.name, "' into expert ranges but it is not an expert tensor");
      return rule.role;
    }
  }
  switch (p.kind) {
    case ParamKind::hidden_matrix: return Role::owned_matrix;
    case ParamKind::embedding:
    case ParamKind::head: return Role::even_shard;
    case ParamKind::other: return Role::even_shard;  // tail; TailPolicy::owner turns it into owned_tail
    case ParamKind::expert_matrix: return Role::expert_range;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown ParamKind");
}

namespace {
// The tail of a unit: parameters of kind `other` that no rule placed explicitly.
bool in_tail(const ParamSpec& p, const PlannerOptions& options) {
  for (const auto& rule : options.rules)
    if (fnmatch(rule.pattern.c_str(), p.name.c_str(), 0) == 0) return false;
  return p.kind == ParamKind::other;
}

Role effective_role(const ParamSpec& p, const PlannerOptions& options) {
  if (in_tail(p, options) && options.tail_policy == TailPolicy::owner) return Role::owned_tail;
  return role_of(p, options);
}

double resident_bytes(const ParamSpec& p, OptimizerKind optimizer, const OptimizerCostConfig& cost) {
  const double elem = static_cast<double>(c10::elementSize(p.dtype));
  return elem * (2.0 * p.numel() + optimizer_state_elements(optimizer, p.shape, cost));
}
}  // namespace

std::vector<PlanItem> plan_items(const ModelSpec& spec, const PlannerOptions& options) {
  validate(spec);
  const std::vector<std::string> units = spec.unit_names();
  auto unit_index = [&](const std::string& name) {
    return static_cast<int>(std::find(units.begin(), units.end(), name) - units.begin());
  };
  std::vector<PlanItem> items;
  std::vector<int> tail_item(units.size(), -1);
  for (size_t i = 0; i < spec.params.size(); ++i) {
    const ParamSpec& p = spec.params[i];
    const Role role = effective_role(p, options);
    const int u = unit_index(p.unit);
    if (role == Role::owned_matrix) {
      PlanItem item{p.name, u, {static_cast<int>(i)}, resident_bytes(p, options.optimizer, options.cost),
                    optimizer_step_cost(options.optimizer, p.shape[0], p.shape[1], options.cost)};
      items.push_back(std::move(item));
    } else if (role == Role::owned_tail) {
      if (tail_item[u] < 0) {
        tail_item[u] = static_cast<int>(items.size());
        items.push_back(PlanItem{units[u] + "/tail", u, {}, 0, 0});
      }
      PlanItem& t = items[tail_item[u]];
      t.params.push_back(static_cast<int>(i));
      t.bytes += resident_bytes(p, OptimizerKind::adamw, options.cost);
      t.cost += optimizer_step_cost(OptimizerKind::adamw, p.numel(), 1, options.cost);
    }
  }
  return items;
}

std::vector<int> assign_owners(const std::vector<PlanItem>& items, int W, const PlannerOptions& options) {
  TORCH_CHECK(W >= 1, "planner: world size must be >= 1, got ", W);
  std::vector<int> owner(items.size(), 0);
  switch (options.planner) {
    case PlannerKind::round_robin:
      for (size_t i = 0; i < items.size(); ++i) owner[i] = static_cast<int>(i % W);  // the strategy itself
      return owner;
    case PlannerKind::greedy_bytes: return greedy(items, W, /*by_cost=*/false);
    case PlannerKind::greedy_cost: return greedy(items, W, /*by_cost=*/true);
    case PlannerKind::balanced: return balanced(items, W);
    case PlannerKind::explicit_assignment: {
      std::map<std::string, int> keys;
      for (size_t i = 0; i < items.size(); ++i) keys.emplace(items[i].key, static_cast<int>(i));
      for (const auto& [name, rank] : options.explicit_owners) {
        TORCH_CHECK(keys.count(name), "planner: explicit assignment names '", name,
                    "', which is not an owned parameter or unit tail of this model");
        TORCH_CHECK(rank >= 0 && rank < W, "planner: explicit assignment puts '", name, "' on rank ", rank,
                    ", outside [0, ", W, ")");
      }
      for (size_t i = 0; i < items.size(); ++i) {
        auto it = options.explicit_owners.find(items[i].key);
        TORCH_CHECK(it != options.explicit_owners.end(), "planner: explicit assignment has no owner for '",
                    items[i].key, "'");
        owner[i] = it->second;
      }
      return owner;
    }
  }
  TORCH_INTERNAL_ASSERT(false, "unknown PlannerKind");
}

std::vector<int> dedup_step_replicas(const OwnershipPlan& plan, int replicas, OptimizerKind optimizer,
                                     const OptimizerCostConfig& cost) {
  TORCH_CHECK(replicas >= 1, "dedup: replicas must be >= 1, got ", replicas);
  const int S = plan.world_size();
  const auto& shards = plan.shards();
  // Cost of each shard on each of the S ranks of a replica.
  std::vector<std::vector<double>> per_rank(shards.size(), std::vector<double>(S, 0.0));
  std::vector<double> total(shards.size(), 0.0);
  for (size_t i = 0; i < shards.size(); ++i) {
    const MatrixShard& s = shards[i];
    if (s.role == Role::owned_matrix) {
      const OptimizerKind kind = s.kind == ParamKind::hidden_matrix ? optimizer : OptimizerKind::adamw;
      per_rank[i][s.owner] = kind == OptimizerKind::adamw ? static_cast<double>(s.numel())
                                                          : optimizer_step_cost(kind, s.shape[0], s.shape[1], cost);
    } else if (s.owned()) {
      per_rank[i][s.owner] = static_cast<double>(s.numel());
    } else if (s.kind == ParamKind::expert_matrix && optimizer != OptimizerKind::adamw) {
      for (const ShardSlice& sl : s.slices)
        per_rank[i][sl.rank] += static_cast<double>(sl.rows) * optimizer_step_cost(optimizer, s.shape[1], s.shape[2], cost);
    } else {
      for (const ShardSlice& sl : s.slices) per_rank[i][sl.rank] += static_cast<double>(sl.rows * s.row_numel());
    }
    for (double c : per_rank[i]) total[i] += c;
  }
  std::vector<size_t> order(shards.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return total[a] > total[b]; });
  std::vector<std::vector<double>> load(replicas, std::vector<double>(S, 0.0));
  std::vector<int> chosen(shards.size(), 0);
  for (size_t i : order) {
    int best = 0;
    double best_peak = 0;
    for (int r = 0; r < replicas; ++r) {
      double peak = 0;
      for (int s = 0; s < S; ++s)
        if (per_rank[i][s] > 0) peak = std::max(peak, load[r][s] + per_rank[i][s]);
      if (r == 0 || peak < best_peak) best = r, best_peak = peak;
    }
    chosen[i] = best;
    for (int s = 0; s < S; ++s) load[best][s] += per_rank[i][s];
  }
  return chosen;
}

std::vector<ExpertRange> expert_ranges(const ParamSpec& p, int W, const PlannerOptions& options,
                                       std::vector<double>& cost_load, std::vector<double>& bytes_load) {
  TORCH_CHECK(p.shape.size() == 3, "planner: expert tensor '", p.name, "' is not 3-D");
  TORCH_CHECK(options.expert_ranges >= 0, "planner: expert ranges must be >= 0 (0: one per rank), got ",
              options.expert_ranges);
  const int64_t E = p.shape[0];
  const int n = static_cast<int>(std::min<int64_t>(E, options.expert_ranges > 0 ? std::min(options.expert_ranges, W) : W));
  const OptimizerKind opt = options.optimizer;
  const std::vector<int64_t> slice{p.shape[1], p.shape[2]};
  const double elem = static_cast<double>(c10::elementSize(p.dtype));
  const double expert_cost = opt == OptimizerKind::adamw
                                 ? optimizer_step_cost(opt, p.shape[1] * p.shape[2], 1, options.cost)
                                 : optimizer_step_cost(opt, slice[0], slice[1], options.cost);
  const double expert_bytes = elem * (2.0 * slice[0] * slice[1] + optimizer_state_elements(opt, slice, options.cost));
  std::vector<ExpertRange> ranges;
  int64_t begin = 0;
  for (int k = 0; k < n; ++k) {
    const int64_t rows = E / n + (k < E % n ? 1 : 0);
    ranges.push_back({0, begin, rows});
    begin += rows;
  }
  // Each rotation scored by (largest cost, sum of squared costs, largest bytes), smallest first:
  // the squares break the ties of the maximum towards the rotation that evens the ranks out.
  int best = 0;
  std::tuple<double, double, double> best_score;
  for (int o = 0; o < W; ++o) {
    std::vector<double> c = cost_load, b = bytes_load;
    for (int k = 0; k < n; ++k) {
      c[(o + k) % W] += expert_cost * static_cast<double>(ranges[k].experts);
      b[(o + k) % W] += expert_bytes * static_cast<double>(ranges[k].experts);
    }
    double squares = 0;
    for (double x : c) squares += x * x;
    const std::tuple<double, double, double> score{*std::max_element(c.begin(), c.end()), squares,
                                                   *std::max_element(b.begin(), b.end())};
    if (o == 0 || score < best_score) best = o, best_score = score;
  }
  for (int k = 0; k < n; ++k) {
    ranges[k].rank = (best + k) % W;
    cost_load[ranges[k].rank] += expert_cost * static_cast<double>(ranges[k].experts);
    bytes_load[ranges[k].rank] += expert_bytes * static_cast<double>(ranges[k].experts);
  }
  return ranges;
}

OwnershipPlan make_plan(const ModelSpec& spec, int W, const PlannerOptions& options) {
  TORCH_CHECK(W >= 1, "planner: world size must be >= 1, got ", W);
  std::vector<PlanItem> items = plan_items(spec, options);  // validates the spec
  std::vector<int> item_owner = assign_owners(items, W, options);
  std::vector<int> param_owner(spec.params.size(), -1);
  std::vector<double> cost_load(W, 0.0), bytes_load(W, 0.0);
  for (size_t i = 0; i < items.size(); ++i) {
    for (int p : items[i].params) param_owner[p] = item_owner[i];
    cost_load[item_owner[i]] += items[i].cost;
    bytes_load[item_owner[i]] += items[i].bytes;
  }
  std::vector<std::vector<ExpertRange>> ranges(spec.params.size());
  for (size_t i = 0; i < spec.params.size(); ++i)
    if (effective_role(spec.params[i], options) == Role::expert_range)
      ranges[i] = expert_ranges(spec.params[i], W, options, cost_load, bytes_load);

  const std::vector<std::string> unit_names = spec.unit_names();
  std::vector<MatrixShard> shards(spec.params.size());
  std::vector<UnitLayout> units(unit_names.size());
  for (size_t u = 0; u < unit_names.size(); ++u) units[u].name = unit_names[u];
  for (size_t i = 0; i < spec.params.size(); ++i) {
    const ParamSpec& p = spec.params[i];
    MatrixShard& s = shards[i];
    s.name = p.name;
    s.shape = p.shape;
    s.dtype = p.dtype;
    s.kind = p.kind;
    s.role = effective_role(p, options);
    s.owner = param_owner[i];
    s.unit = static_cast<int>(std::find(unit_names.begin(), unit_names.end(), p.unit) - unit_names.begin());
    units[s.unit].dtype = p.dtype;
    units[s.unit].shards.push_back(static_cast<int>(i));
    if (s.role == Role::owned_tail) units[s.unit].tail_owner = s.owner;
    for (const ExpertRange& x : ranges[i]) s.slices.push_back({x.rank, 0, x.first_expert, x.experts, x.experts});
  }
  for (size_t i = 0; i < spec.params.size(); ++i)
    for (const std::string& u : spec.params[i].also_used_by)
      units[std::find(unit_names.begin(), unit_names.end(), u) - unit_names.begin()].borrowed.push_back(static_cast<int>(i));
  // Lay out each unit rank-major: per rank, its even slices, then what it owns.
  for (UnitLayout& u : units) {
    const int64_t align = align_elements(u.dtype);
    int64_t cursor = 0;
    for (int r = 0; r < W; ++r) {
      const int64_t start = cursor;
      for (int si : u.shards) {
        MatrixShard& s = shards[si];
        if (s.role != Role::even_shard) continue;
        const int64_t chunk = even_chunk_rows(s.shape[0], W);
        const auto [begin, end] = even_rows(s.shape[0], W, r);
        cursor = align_up(cursor, align);
        s.slices.push_back({r, cursor, begin, end - begin, chunk});
        cursor += chunk * s.row_numel();
      }
      for (int si : u.shards) {
        MatrixShard& s = shards[si];
        if (s.owned() && s.owner == r) {
          cursor = align_up(cursor, align);
          s.slices.push_back({r, cursor, 0, s.shape[0], s.shape[0]});
          cursor += s.numel();
        }
        for (ShardSlice& sl : s.slices) {  // expert ranges: the one on this rank, if any
          if (s.role != Role::expert_range || sl.rank != r) continue;
          cursor = align_up(cursor, align);
          sl.offset = cursor;
          cursor += sl.rows * s.row_numel();
        }
      }
      cursor = align_up(cursor, align);
      u.segments.push_back({start, cursor - start});
    }
    u.numel = cursor;
  }
  PlanMeta meta{options.planner, options.tail_policy, spec.name};
  return OwnershipPlan(W, std::move(meta), std::move(shards), std::move(units));
}

}  // namespace mfsdp
