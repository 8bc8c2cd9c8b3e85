// Parameters by name: what the model reads, the runtime hands out and the oracle holds.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <unordered_map>

namespace mfsdp {

using ParamMap = std::unordered_map<std::string, at::Tensor>;

}  // namespace mfsdp
