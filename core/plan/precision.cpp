#include "core/plan/precision.h"

#include "core/plan/model_spec.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

namespace mfsdp {
namespace {

c10::ScalarType policy_dtype(const char* flag, const std::string& name) {
  std::optional<c10::ScalarType> d;
  try {
    d = dtype_from_string(name);
  } catch (const c10::Error&) {
  }
  TORCH_CHECK(d && (*d == c10::kFloat || *d == c10::kBFloat16), flag, ": '", name,
              "' is not a policy dtype (fp32 or bf16, also spelled float32, bfloat16; masters are fp32)");
  return *d;
}

}  // namespace

PrecisionPolicy precision_from_flags(const std::string& param_dtype, const std::string& reduce_dtype,
                                     const std::string& output_dtype) {
  PrecisionPolicy p;
  p.param_dtype = policy_dtype("--param-dtype", param_dtype);
  p.reduce_dtype = policy_dtype("--reduce-dtype", reduce_dtype);
  if (!output_dtype.empty()) p.output_dtype = policy_dtype("--output-dtype", output_dtype);
  return p;
}

const char* short_dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat: return "fp32";
    case c10::kBFloat16: return "bf16";
    case c10::kHalf: return "fp16";
    case c10::kDouble: return "fp64";
    default: return c10::toString(dtype);
  }
}

nlohmann::json precision_to_json(const PrecisionPolicy& policy, c10::ScalarType master) {
  nlohmann::ordered_json j{{"master_dtype", short_dtype_name(master)},
                           {"param_dtype", short_dtype_name(policy.param_dtype)},
                           {"reduce_dtype", short_dtype_name(policy.reduce_dtype)}};
  if (policy.output_dtype) j["output_dtype"] = short_dtype_name(*policy.output_dtype);
  return nlohmann::json(j);
}

std::string to_string(const PrecisionPolicy& policy) {
  std::string s = std::string("param ") + short_dtype_name(policy.param_dtype) + ", reduce " +
                  short_dtype_name(policy.reduce_dtype);
  if (policy.output_dtype) s += std::string(", output ") + short_dtype_name(*policy.output_dtype);
  return s;
}

}  // namespace mfsdp
