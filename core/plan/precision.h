// The precision policy (FSDP2's MixedPrecisionPolicy): what dtype each copy of a parameter and its
// gradient has (docs/precision.md).
//
//   master       the stored segments, every owner's matrices, their gradients for the step and the
//                optimizer state: the spec's dtype (float32 in `mfsdp train`)
//   param_dtype  the compute copy: what unshard sends and forward/backward read; gradients come
//                out of backward in this dtype
//   reduce_dtype gradients are cast to it before the reduction (the wire dtype); deterministic
//                mode accumulates in float32 (or float64 masters) in rank order and divides once
//                whatever it is, fast mode sums natively in it
//   output_dtype each unit's output is cast to it (unset: left as computed); the next unit casts
//                its input back to param_dtype, as FSDP2's cast_forward_inputs does
#pragma once

#include <c10/core/ScalarType.h>
#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>

namespace mfsdp {

struct PrecisionPolicy {
  c10::ScalarType param_dtype = c10::kFloat;
  c10::ScalarType reduce_dtype = c10::kFloat;
  std::optional<c10::ScalarType> output_dtype;

  // A compute copy distinct from the master exists (the unit's gathered buffer also holds this
  // rank's own segment, cast).
  bool casts(c10::ScalarType master) const { return param_dtype != master; }
  bool operator==(const PrecisionPolicy&) const = default;
};

// Policies `mfsdp train` and `mfsdp plan` accept: param and reduce dtypes in {float32, bfloat16},
// output dtype unset or one of those; masters are float32. Throws naming the flag.
PrecisionPolicy precision_from_flags(const std::string& param_dtype, const std::string& reduce_dtype,
                                     const std::string& output_dtype);
// "param bf16, reduce fp32" (and ", output fp32" when set).
std::string to_string(const PrecisionPolicy& policy);
const char* short_dtype_name(c10::ScalarType dtype);  // fp32, bf16, fp16, fp64
// {"master_dtype", "param_dtype", "reduce_dtype"[, "output_dtype"]}: what checkpoints, metrics and
// plan JSON record.
nlohmann::json precision_to_json(const PrecisionPolicy& policy, c10::ScalarType master = c10::kFloat);

}  // namespace mfsdp
