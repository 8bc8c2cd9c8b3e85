#include "core/runtime/unit.h"

#include "core/runtime/reduction.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <algorithm>

namespace mfsdp {

const char* to_string(UnitState state) {
  switch (state) {
    case UnitState::sharded: return "sharded";
    case UnitState::unsharded: return "unsharded";
    case UnitState::pinned: return "pinned";
    case UnitState::revived: return "revived";
    case UnitState::reducing: return "reducing";
  }
  TORCH_INTERNAL_ASSERT(false, "unknown UnitState");
}

const char* to_string(UnshardStrategy strategy) {
  switch (strategy) {
    case UnshardStrategy::broadcast: return "broadcast";
    case UnshardStrategy::allgather_even: return "allgather_even";
    case UnshardStrategy::per_segment: return "per_segment";
  }
  TORCH_INTERNAL_ASSERT(false, "unknown UnshardStrategy");
}

const char* to_string(ReduceMode mode) {
  return mode == ReduceMode::deterministic ? "deterministic" : "fast";
}

Unit::Unit(const OwnershipPlan& plan, int unit_index, Communicator& comm, at::Device device, UnshardStrategy strategy,
           PrecisionPolicy precision)
    : plan_(plan), layout_(plan.units().at(unit_index)), index_(unit_index), comm_(comm), device_(device),
      rank_(comm.rank()), strategy_(strategy), precision_(precision), casts_(precision.casts(layout_.dtype)) {
  TORCH_CHECK(comm.world_size() == plan.world_size(), "unit '", layout_.name, "': plan is for world size ",
              plan.world_size(), " but the process group has ", comm.world_size(), " ranks");
  const auto opts = at::TensorOptions().dtype(layout_.dtype).device(device_);
  segment_ = at::zeros({layout_.segments[rank_].numel}, opts);
  segment_grad_ = at::zeros({layout_.segments[rank_].numel}, opts);
  compute_options_ = opts.dtype(precision_.param_dtype);
  reduce_options_ = opts.dtype(precision_.reduce_dtype);
  // Gathered layout: other ranks' segments in rank order (this rank's own too when it casts),
  // then each even parameter in full.
  const int64_t align = align_elements(layout_.dtype);
  int64_t cursor = 0;
  for (int r = 0; r < plan.world_size(); ++r) {
    const bool here = r != rank_ || casts_;
    other_segment_offset_.push_back(here ? cursor : -1);
    if (here) cursor += layout_.segments[r].numel;  // segment sizes are aligned
  }
  for (int s : layout_.shards) {
    const MatrixShard& shard = plan.shards()[s];
    if (shard.owned()) {
      even_full_offset_.push_back(-1);
    } else {
      cursor = (cursor + align - 1) / align * align;
      even_full_offset_.push_back(cursor);
      cursor += shard.numel();
    }
  }
  gathered_numel_ = (cursor + align - 1) / align * align;
  // The even prefix: the plan puts every even slice first in each segment, same sizes everywhere.
  for (int r = 0; r < plan.world_size(); ++r) {
    int64_t prefix = 0;
    for (int s : layout_.shards) {
      const MatrixShard& shard = plan.shards()[s];
      if (shard.role != Role::even_shard) continue;  // whole parameters and expert ranges follow the prefix
      const ShardSlice& sl = shard.slices[r];
      prefix = std::max(prefix, sl.offset + sl.padded_rows * shard.row_numel() - layout_.segments[r].offset);
    }
    prefix = std::min((prefix + align - 1) / align * align, layout_.segments[r].numel);
    TORCH_INTERNAL_ASSERT(r == 0 || prefix == even_prefix_, "unit '", layout_.name, "': even prefixes differ across ranks");
    even_prefix_ = prefix;
  }
  segments_are_prefixes_ = even_prefix_ > 0;
  for (int r = 0; r < plan.world_size(); ++r)
    segments_are_prefixes_ = segments_are_prefixes_ && layout_.segments[r].offset == r * even_prefix_ &&
                             layout_.segments[r].numel == even_prefix_;
  for (int s : layout_.shards) {
    const MatrixShard& shard = plan.shards()[s];
    RegularEven reg;
    if (shard.role == Role::even_shard && static_cast<int>(shard.slices.size()) == plan.world_size() && !shard.shape.empty()) {
      const int64_t P = shard.slices[0].padded_rows, total = shard.shape[0];
      const int64_t at = shard.slices[0].offset - layout_.segments[0].offset;
      bool regular = P > 0 && at >= 0 && at + P * shard.row_numel() <= even_prefix_;
      for (int r = 0; r < plan.world_size() && regular; ++r) {
        const ShardSlice& sl = shard.slices[r];
        regular = sl.rank == r && sl.padded_rows == P && sl.offset - layout_.segments[r].offset == at &&
                  sl.rows == std::clamp<int64_t>(total - r * P, 0, P) && (sl.rows == 0 || sl.row_begin == r * P);
      }
      if (regular) reg = {at, P};
    }
    if (shard.role == Role::even_shard && reg.at < 0) all_even_regular_ = false;
    regular_even_.push_back(reg);
  }
  // The gathered StorageImpl exists for the unit's lifetime; only its memory comes and goes.
  at::Tensor holder = at::empty({0}, compute_options_);
  gathered_ = holder.storage();
}

const std::string& Unit::name() const { return layout_.name; }
const std::vector<int>& Unit::shards() const { return layout_.shards; }
int64_t Unit::compute_elem_size() const { return static_cast<int64_t>(c10::elementSize(precision_.param_dtype)); }
int64_t Unit::gathered_bytes() const { return static_cast<int64_t>(gathered_.nbytes()); }

void Unit::transition(UnitState to) {
  const UnitState from = state_;
  bool legal = false;
  switch (from) {
    case UnitState::sharded: legal = to == UnitState::unsharded; break;
    case UnitState::unsharded:
      legal = to == UnitState::pinned || to == UnitState::sharded || to == UnitState::reducing;
      break;
    case UnitState::pinned: legal = to == UnitState::revived || to == UnitState::sharded; break;
    case UnitState::revived: legal = to == UnitState::reducing; break;
    case UnitState::reducing: legal = to == UnitState::sharded; break;
  }
  TORCH_CHECK(legal, "unit '", layout_.name, "' on rank ", rank_, ": illegal lifecycle move ", to_string(from), " -> ",
              to_string(to));
  state_ = to;
}

void Unit::allocate_gathered() {
  c10::StorageImpl* impl = gathered_.unsafeGetStorageImpl();
  const size_t nbytes = static_cast<size_t>(gathered_numel_ * compute_elem_size());
  impl->set_data_ptr_noswap(impl->allocator()->allocate(nbytes));
  impl->set_nbytes(nbytes);
}

void Unit::free_gathered() {
  c10::StorageImpl* impl = gathered_.unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, device_));
  impl->set_nbytes(0);
}

namespace {
// A fresh contiguous tensor over `storage` (its own version counter: refilling the storage never
// looks like an in-place change of a tensor autograd saved).
at::Tensor alias(const c10::Storage& storage, int64_t offset, at::IntArrayRef sizes, const at::TensorOptions& opts) {
  at::Tensor t = at::empty({0}, opts);
  std::vector<int64_t> strides(sizes.size(), 1);
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 2; d >= 0; --d) strides[d] = strides[d + 1] * sizes[d + 1];
  t.set_(storage, offset, sizes, strides);
  return t;
}
}  // namespace

at::Tensor Unit::gathered_view(int64_t offset, at::IntArrayRef sizes) const {
  return alias(gathered_, offset, sizes, compute_options_);
}

at::Tensor Unit::segment_of(int rank) const {
  if (rank == rank_ && !casts_) return segment_;
  return gathered_view(other_segment_offset_[rank], {layout_.segments[rank].numel});
}

void Unit::begin_fill() {
  PhaseScope phase(comm_, Phase::unshard);
  UnitScope tag(comm_, index_);
  const int W = plan_.world_size();
  if (casts_) segment_of(rank_).copy_(segment_);  // this rank's compute copy: what it sends and reads
  // allgather_even: the even tail's prefixes in one all-gather, then each rank's owned remainder.
  const bool tail = strategy_ == UnshardStrategy::allgather_even && even_prefix_ > 0 && W > 1;
  const int64_t skip = tail ? even_prefix_ : 0;  // elements at the start of each segment the all-gather moves
  auto issue = [&] {
    if (tail) {
      fill_prefixes_ = at::empty({W * even_prefix_}, compute_options_);
      at::Tensor mine = segment_of(rank_).narrow(0, 0, even_prefix_);
      fill_works_.push_back(comm_.allgather(fill_prefixes_, mine));
    }
    for (int r = 0; r < W; ++r) {
      const int64_t rest = layout_.segments[r].numel - skip;
      if (rest == 0) continue;  // empty segments (or remainders) never move
      at::Tensor target = segment_of(r).narrow(0, skip, rest);  // the root sends its own (compute) segment
      fill_works_.push_back(comm_.broadcast(target, r));
    }
  };
  if (strategy_ == UnshardStrategy::per_segment || W == 1) {
    issue();
  } else if (comm_.grouping()) {  // parts of a caller's group: its Work is adopted (adopt_group_work)
    const size_t before = fill_works_.size();
    issue();
    fill_works_.resize(before);
  } else {  // the whole fill, tail included, as one group: one collective of the unit
    const size_t before = fill_works_.size();
    c10::intrusive_ptr<c10d::Work> group = comm_.group(issue);
    fill_works_.resize(before);  // the group's Work stands for its parts
    if (group) fill_works_.push_back(group);
  }
  fill_pending_ = true;
}

namespace {

// A regularly laid-out even parameter (Unit::RegularEven) as pairs of views over the same elements:
// its rows in the W segments' even prefixes (`prefixes`, [W, even prefix]) and in the full tensor
// (`full`, flat). The ranks whose P rows are all real form one strided pair, the one with fewer
// another. end_fill copies prefixes -> full, reduce_to_owner full -> prefixes.
std::vector<std::pair<at::Tensor, at::Tensor>> regular_even_views(const at::Tensor& prefixes, const at::Tensor& full, int64_t at,
                                                                  int64_t P, int64_t rows, int64_t row_numel) {
  std::vector<std::pair<at::Tensor, at::Tensor>> views;
  const int64_t whole = rows / P, rest = rows % P;
  if (whole > 0)
    views.emplace_back(prefixes.narrow(0, 0, whole).narrow(1, at, P * row_numel),
                       full.narrow(0, 0, whole * P * row_numel).view({whole, P * row_numel}));
  if (rest > 0)
    views.emplace_back(prefixes.select(0, whole).narrow(0, at, rest * row_numel), full.narrow(0, whole * P * row_numel, rest * row_numel));
  return views;
}

}  // namespace

void Unit::end_fill() {
  {
    PhaseScope phase(comm_, Phase::unshard);
    for (auto& w : fill_works_) w->wait();
  }
  fill_works_.clear();
  fill_pending_ = false;
  const int W = plan_.world_size();
  const bool from_prefixes = fill_prefixes_.defined();  // regular even parameters copy out of them
  if (from_prefixes) {
    // Only the per-rank copies below read other ranks' prefixes in place (whole parameters' views
    // start after the prefix), so they are filled only for a unit that has an irregular one.
    if (!all_even_regular_) {
      for (int r = 0; r < W; ++r) {
        if (r != rank_) segment_of(r).narrow(0, 0, even_prefix_).copy_(fill_prefixes_.narrow(0, r * even_prefix_, even_prefix_));
      }
    }
    // Regularly laid-out even parameters straight from the gathered prefixes (rank-major, each
    // rank's real rows in order): the ranks whose P rows are all real in one strided copy, the
    // one with fewer in another. The same elements as the per-rank copies below.
    const at::Tensor prefixes = fill_prefixes_.view({W, even_prefix_});
    for (size_t k = 0; k < layout_.shards.size(); ++k) {
      const RegularEven& reg = regular_even_[k];
      if (reg.at < 0) continue;
      const MatrixShard& s = plan_.shards()[layout_.shards[k]];
      const at::Tensor full = gathered_view(even_full_offset_[k], {s.numel()});
      for (const auto& [in_prefixes, in_full] : regular_even_views(prefixes, full, reg.at, reg.padded_rows, s.shape[0], s.row_numel()))
        in_full.copy_(in_prefixes);
    }
    fill_prefixes_ = at::Tensor();
  }
  // Copy out even-sharded parameters: each rank's real rows into the full tensor.
  for (size_t k = 0; k < layout_.shards.size(); ++k) {
    const MatrixShard& s = plan_.shards()[layout_.shards[k]];
    if (s.owned() || (from_prefixes && regular_even_[k].at >= 0)) continue;
    at::Tensor full = gathered_view(even_full_offset_[k], {s.numel()});
    const int64_t row_numel = s.row_numel();
    for (const ShardSlice& sl : s.slices) {
      if (sl.rows == 0) continue;
      const int64_t seg_offset = layout_.segments[sl.rank].offset;
      at::Tensor src = segment_of(sl.rank).narrow(0, sl.offset - seg_offset, sl.rows * row_numel);
      full.narrow(0, sl.row_begin * row_numel, sl.rows * row_numel).copy_(src);
    }
  }
}

void Unit::unshard() {
  unshard_async();
  wait_fill();
}

void Unit::unshard_async() {
  transition(UnitState::unsharded);
  allocate_gathered();
  begin_fill();
}

void Unit::reshard(bool keep_for_backward) {
  TORCH_CHECK(!fill_in_flight(), "unit '", layout_.name, "' on rank ", rank_, ": reshard while its unshard is in flight");
  transition(keep_for_backward ? UnitState::pinned : UnitState::sharded);
  free_gathered();
}

void Unit::revive() {
  revive_async();
  wait_fill();
}

void Unit::revive_async() {
  transition(UnitState::revived);
  allocate_gathered();
  begin_fill();
}

void Unit::wait_fill() {
  if (fill_in_flight()) end_fill();
}

void Unit::release() {
  transition(UnitState::sharded);
  free_gathered();
}

std::vector<at::Tensor> Unit::full_views() const {
  TORCH_CHECK(!fill_in_flight(), "unit '", layout_.name, "' on rank ", rank_, ": full views read while the fill is in flight");
  std::vector<at::Tensor> views;
  for (size_t k = 0; k < layout_.shards.size(); ++k) {
    const MatrixShard& s = plan_.shards()[layout_.shards[k]];
    if (!s.owned()) {
      views.push_back(gathered_view(even_full_offset_[k], s.shape));
    } else if (s.owner == rank_ && !casts_) {
      const int64_t local = s.slices[0].offset - layout_.segments[rank_].offset;
      views.push_back(alias(segment_.storage(), segment_.storage_offset() + local, s.shape, segment_.options()));
    } else {
      const int64_t local = s.slices[0].offset - layout_.segments[s.owner].offset;
      views.push_back(gathered_view(other_segment_offset_[s.owner] + local, s.shape));
    }
  }
  return views;
}

std::vector<at::Tensor> Unit::gather_masters() { return gather_segment(segment_, "masters"); }

std::vector<at::Tensor> Unit::gather_grads() { return gather_segment(segment_grad_, "gradients"); }

std::vector<at::Tensor> Unit::gather_segment(const at::Tensor& segment, const char* what) {
  TORCH_CHECK(state_ == UnitState::sharded, "unit '", layout_.name, "' on rank ", rank_,
              ": ", what, " gathered while the unit is ", to_string(state_));
  UnitScope tag(comm_, index_);
  const int W = plan_.world_size();
  at::Tensor flat = at::zeros({layout_.numel}, segment.options());  // rank-major, as the plan lays it out
  flat.narrow(0, layout_.segments[rank_].offset, segment.numel()).copy_(segment);
  std::vector<at::Tensor> parts;  // alive until the broadcasts complete
  if (W > 1) {
    c10::intrusive_ptr<c10d::Work> group = comm_.group([&] {
      for (int r = 0; r < W; ++r) {
        if (layout_.segments[r].numel == 0) continue;
        parts.push_back(flat.narrow(0, layout_.segments[r].offset, layout_.segments[r].numel));
        comm_.broadcast(parts.back(), r);
      }
    });
    if (group) group->wait();
  }
  std::vector<at::Tensor> out;
  for (int si : layout_.shards) {
    const MatrixShard& s = plan_.shards()[si];
    at::Tensor full = at::empty(s.shape, segment.options().device(at::kCPU));
    at::Tensor full_flat = full.view({-1});
    for (const ShardSlice& sl : s.slices) {
      if (sl.rows == 0) continue;
      full_flat.narrow(0, sl.row_begin * s.row_numel(), sl.rows * s.row_numel()).copy_(flat.narrow(0, sl.offset, sl.rows * s.row_numel()));
    }
    out.push_back(full);
  }
  return out;
}

namespace {
at::Tensor local_view(const at::Tensor& flat, const MatrixShard& s, int rank, int64_t segment_offset) {
  for (const ShardSlice& sl : s.slices) {
    if (sl.rank != rank || sl.rows == 0) continue;
    std::vector<int64_t> shape = s.shape;
    shape[0] = sl.rows;
    return flat.narrow(0, sl.offset - segment_offset, sl.rows * s.row_numel()).view(shape);
  }
  return at::Tensor();
}
}  // namespace

at::Tensor Unit::local_param(int shard) const {
  return local_view(segment_, plan_.shards()[shard], rank_, layout_.segments[rank_].offset);
}

at::Tensor Unit::local_grad(int shard) const {
  return local_view(segment_grad_, plan_.shards()[shard], rank_, layout_.segments[rank_].offset);
}

void Unit::reduce_to_owner(const std::vector<at::Tensor>& full_grads, ReduceMode mode) {
  TORCH_CHECK(full_grads.size() == layout_.shards.size(), "unit '", layout_.name, "': expected ",
              layout_.shards.size(), " gradients, got ", full_grads.size());
  TORCH_CHECK(!fill_in_flight(), "unit '", layout_.name, "' on rank ", rank_, ": gradients reduced while its fill is in flight");
  transition(UnitState::reducing);
  free_gathered();
  reduce_mode_ = mode;
  const int W = plan_.world_size();
  // This rank's gradient in the unit's rank-major layout (padding stays zero).
  grad_flat_ = at::zeros({layout_.numel}, reduce_options_);  // cast to the wire dtype here
  // `packed`: every segment's even prefix, rank after rank; even slices are written there directly
  // (they all lie in the prefixes), a regularly laid-out even parameter in two strided copies (the
  // mirror of end_fill's) instead of W slice copies. The fast reduce's reduce-scatter takes it as
  // its input (the same elements as writing grad_flat_ and packing its prefixes rank by rank); a
  // unit of even parameters alone (every segment is its even prefix) is that layout already, so
  // there it is grad_flat_ itself.
  const bool packed_prefixes = mode == ReduceMode::fast && W > 1 && even_prefix_ > 0;
  at::Tensor packed = packed_prefixes ? at::zeros({W * even_prefix_}, reduce_options_)
                      : segments_are_prefixes_ && W > 1 ? grad_flat_
                                                        : at::Tensor();
  for (size_t k = 0; k < layout_.shards.size(); ++k) {
    const at::Tensor& g = full_grads[k];
    if (!g.defined()) continue;  // the parameter took no part: its gradient is zero
    const MatrixShard& s = plan_.shards()[layout_.shards[k]];
    at::Tensor flat = g.reshape({-1});
    const int64_t row_numel = s.row_numel();
    if (packed.defined() && s.role == Role::even_shard) {
      const RegularEven& reg = regular_even_[k];
      if (reg.at >= 0) {
        for (const auto& [in_packed, in_flat] :
             regular_even_views(packed.view({W, even_prefix_}), flat, reg.at, reg.padded_rows, s.shape[0], row_numel))
          in_packed.copy_(in_flat);
        continue;
      }
      for (const ShardSlice& sl : s.slices) {
        if (sl.rows == 0) continue;
        const int64_t at = sl.rank * even_prefix_ + sl.offset - layout_.segments[sl.rank].offset;
        packed.narrow(0, at, sl.rows * row_numel).copy_(flat.narrow(0, sl.row_begin * row_numel, sl.rows * row_numel));
      }
      continue;
    }
    for (const ShardSlice& sl : s.slices) {
      if (sl.rows == 0) continue;
      grad_flat_.narrow(0, sl.offset, sl.rows * row_numel).copy_(flat.narrow(0, sl.row_begin * row_numel, sl.rows * row_numel));
    }
  }
  PhaseScope phase(comm_, Phase::grad_reduce);
  UnitScope tag(comm_, index_);
  const int64_t mine = layout_.segments[rank_].numel;
  if (mode == ReduceMode::deterministic) {
    // One uneven all-to-all: every rank sends segment r of its gradient to rank r; the owner gets
    // all W contributions side by side, in rank order.
    contributions_ = at::empty({W * mine}, reduce_options_);
    if (W == 1) {
      contributions_.copy_(grad_flat_);
    } else {
      std::vector<int64_t> in_splits, out_splits(W, mine);
      for (int r = 0; r < W; ++r) in_splits.push_back(layout_.segments[r].numel);
      pending_.push_back(comm_.alltoall(contributions_, grad_flat_, out_splits, in_splits));
    }
  } else if (W > 1) {
    // One group: the tail's equal-size even prefixes in one reduce-scatter (packed rank after
    // rank), and a native reduce for each rank's owned remainder.
    auto issue = [&] {
      if (even_prefix_ > 0) {
        prefix_sum_ = at::empty({even_prefix_}, reduce_options_);
        comm_.reduce_scatter_sum(prefix_sum_, packed);
        contributions_ = packed;  // kept alive until the reduce-scatter completes
      }
      for (int r = 0; r < W; ++r) {
        const Segment& seg = layout_.segments[r];
        if (seg.numel == even_prefix_) continue;
        at::Tensor region = grad_flat_.narrow(0, seg.offset + even_prefix_, seg.numel - even_prefix_);
        comm_.reduce_sum(region, r);
      }
    };
    if (comm_.grouping()) {
      issue();  // parts of a caller's group: its Work is adopted (adopt_group_work)
    } else {
      c10::intrusive_ptr<c10d::Work> group = comm_.group(issue);
      if (group) pending_.push_back(group);
    }
  }
  if (comm_.grouping()) pending_.clear();  // the all-to-all's own Work: the caller's group stands for it
}

void Unit::adopt_group_work(const c10::intrusive_ptr<c10d::Work>& work) {
  if (!work) return;
  if (state_ == UnitState::reducing) {
    TORCH_CHECK(!kept_local_, "unit '", layout_.name, "' on rank ", rank_, ": a group's Work adopted for gradients kept local");
    pending_.push_back(work);
  } else {
    TORCH_CHECK(fill_pending_, "unit '", layout_.name, "' on rank ", rank_, ": a group's Work adopted with no fill issued (state ",
                to_string(state_), ")");
    fill_works_.push_back(work);
  }
}

void Unit::keep_gradients_local() {
  TORCH_CHECK(!fill_in_flight(), "unit '", layout_.name, "' on rank ", rank_, ": gradients kept while its fill is in flight");
  transition(UnitState::reducing);
  free_gathered();
  kept_local_ = true;
}

void Unit::finish_reduction(int64_t divisor) {
  TORCH_CHECK(state_ == UnitState::reducing, "unit '", layout_.name, "' on rank ", rank_,
              ": finish_reduction with no reduction in flight (state ", to_string(state_), ")");
  if (kept_local_) {
    kept_local_ = false;
    transition(UnitState::sharded);
    return;
  }
  {
    PhaseScope phase(comm_, Phase::grad_reduce);
    for (auto& w : pending_) w->wait();
  }
  pending_.clear();
  const int W = plan_.world_size();
  const int64_t mine = layout_.segments[rank_].numel;
  if (mine > 0) {
    if (reduce_mode_ == ReduceMode::deterministic) {
      std::vector<at::Tensor> parts;
      for (int r = 0; r < W; ++r) parts.push_back(contributions_.narrow(0, r * mine, mine));
      // float32 accumulation whatever the wire dtype
      at::Tensor sum = sum_in_rank_order(parts, accumulation_dtype(layout_.dtype));
      segment_grad_.copy_(divisor > 0 ? divide_sum(std::move(sum), divisor, layout_.dtype) : sum);
    } else {
      at::Tensor sum = grad_flat_.narrow(0, layout_.segments[rank_].offset, mine);
      if (prefix_sum_.defined()) sum.narrow(0, 0, even_prefix_).copy_(prefix_sum_);
      at::Tensor native = sum.to(layout_.dtype);  // the native sum, divided in the master dtype
      segment_grad_.copy_(divisor > 0 ? native.div(static_cast<double>(divisor)) : native);
    }
  }
  grad_flat_ = at::Tensor();
  contributions_ = at::Tensor();
  prefix_sum_ = at::Tensor();
  transition(UnitState::sharded);
}

}  // namespace mfsdp
