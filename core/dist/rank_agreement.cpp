#include "core/dist/rank_agreement.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>

namespace mfsdp {

std::vector<std::string> allgather_strings(Communicator& comm, const std::string& mine) {
  const int W = comm.world_size();
  at::Tensor len = at::tensor({static_cast<int64_t>(mine.size())}, at::TensorOptions().dtype(at::kLong)).to(comm.control_device());
  at::Tensor lens = at::empty({W}, comm.control_options(at::kLong));
  comm.allgather(lens, len)->wait();
  lens = lens.cpu();
  int64_t longest = 0;
  for (int r = 0; r < W; ++r) longest = std::max(longest, lens[r].item<int64_t>());
  at::Tensor bytes = at::zeros({std::max<int64_t>(longest, 1)}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(bytes.mutable_data_ptr(), mine.data(), mine.size());
  bytes = bytes.to(comm.control_device());
  at::Tensor all = at::empty({W * bytes.numel()}, comm.control_options(at::kByte));
  comm.allgather(all, bytes)->wait();
  all = all.cpu();
  std::vector<std::string> out;
  for (int r = 0; r < W; ++r) {
    const char* p = reinterpret_cast<const char*>(all.const_data_ptr<uint8_t>()) + r * bytes.numel();
    out.emplace_back(p, static_cast<size_t>(lens[r].item<int64_t>()));
  }
  return out;
}

void check_same_settings(Communicator& comm, const std::string& what, const std::string& mine) {
  const std::vector<std::string> all = allgather_strings(comm, mine);
  std::string differ;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) differ += (differ.empty() ? "" : "; ") + ("rank " + std::to_string(r) + " has '" + all[r] + "'");
  TORCH_CHECK(differ.empty(), what, " differs across ranks: rank 0 has '", all[0], "', ", differ,
              " (every rank must be started with the same settings)");
}

void fail_together(Communicator& comm, const std::string& error, const std::string& what) {
  const std::vector<std::string> errors = allgather_strings(comm, error);
  for (size_t r = 0; r < errors.size(); ++r) {
    if (errors[r].empty()) continue;
    TORCH_CHECK(false, what, " failed on rank ", r, ": ", errors[r]);
  }
}

namespace {
// Every rank's `local`, rank-major (W x n), on the CPU.
at::Tensor allgather_doubles(Communicator& comm, const std::vector<double>& local) {
  const int W = comm.world_size();
  const int64_t n = static_cast<int64_t>(local.size());
  at::Tensor mine = at::tensor(local, at::TensorOptions().dtype(at::kDouble)).to(comm.control_device());
  at::Tensor all = at::empty({W * n}, comm.control_options(at::kDouble));
  comm.allgather(all, mine)->wait();
  return all.cpu();
}
}  // namespace

std::vector<double> mean_over_ranks(Communicator& comm, const std::vector<double>& local) {
  const int W = comm.world_size();
  const int64_t n = static_cast<int64_t>(local.size());
  std::vector<double> out(local.size(), 0.0);
  if (n == 0) return out;
  const at::Tensor all = allgather_doubles(comm, local);
  const double* v = all.const_data_ptr<double>();
  for (int r = 0; r < W; ++r)
    for (int64_t s = 0; s < n; ++s) out[s] += v[r * n + s];
  for (double& x : out) x /= W;
  return out;
}

std::vector<double> max_over_ranks(Communicator& comm, const std::vector<double>& local) {
  const int64_t n = static_cast<int64_t>(local.size());
  std::vector<double> out = local;
  if (n == 0) return out;
  const at::Tensor all = allgather_doubles(comm, local);
  const double* v = all.const_data_ptr<double>();
  for (int r = 0; r < comm.world_size(); ++r)
    for (int64_t s = 0; s < n; ++s) out[s] = std::max(out[s], v[r * n + s]);
  return out;
}

}  // namespace mfsdp
