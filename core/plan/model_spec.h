// What the planner plans: a model as a list of parameter specs (shapes only, no weights).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mfsdp {

enum class ParamKind {
  hidden_matrix,  // 2-D weight inside a block: owned whole, matrix optimizer
  embedding,      // token embedding: even row shards, AdamW
  head,           // output head: even row shards, AdamW
  other,          // 1-D and everything else: the unit's tail, AdamW
  expert_matrix,  // 3-D [experts, out, in] MoE weights: each [out, in] slice a matrix; cut along
                  // the experts into contiguous expert ranges, each owned whole by one rank
};
// Stepped by the matrix optimizer (an expert tensor slice by slice).
inline bool matrix_kind(ParamKind kind) { return kind == ParamKind::hidden_matrix || kind == ParamKind::expert_matrix; }

const char* to_string(ParamKind kind);
ParamKind param_kind_from_string(const std::string& name);  // throws on unknown names

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  c10::ScalarType dtype = c10::kFloat;
  std::string unit;  // the unit (FSDP2 param group) it is gathered with
  ParamKind kind = ParamKind::other;
  // Tied parameters: later units that use this parameter too (e.g. the output head using the
  // token embedding). Its unit stays gathered from its forward until its backward, and the
  // gradient of every use is summed before the reduction.
  std::vector<std::string> also_used_by;

  int64_t numel() const;
  int64_t bytes() const;
};

struct ModelSpec {
  std::string name;
  std::vector<ParamSpec> params;  // in forward order; units appear in forward order

  int64_t numel() const;
  // Unit names in order of first appearance.
  std::vector<std::string> unit_names() const;
};

// Dtypes a plan can hold: float32, float64, bfloat16, float16.
bool supported_dtype(c10::ScalarType dtype);
c10::ScalarType dtype_from_string(const std::string& name);  // "bf16", "bfloat16", "torch.float32", ...

// The unit and kind a bare PyTorch parameter name implies: the unit is the module path up to and
// including the first numeric component ("model.layers.3"), else the module path
// ("lm_head.weight" -> "lm_head"); 2-D tensors named like embeddings or output heads get those
// kinds, other 2-D tensors are hidden matrices, everything else is `other`.
std::string infer_unit(const std::string& param_name);
ParamKind infer_kind(const std::string& param_name, const std::vector<int64_t>& shape);

// Checks names are unique and non-empty, shapes positive, dtypes supported, every unit's
// parameters share one dtype, and every unit a tied parameter is also used by exists and comes
// after the parameter's own unit. Throws naming the parameter.
void validate(const ModelSpec& spec);

// A JSON spec: a list (or {"params": [...]}) of {"name", "shape", "dtype"[, "unit", "kind",
// "also_used_by"]}, as exported from PyTorch's named_parameters() (which lists a tied parameter
// once: "also_used_by" names the other units using it). Errors name the entry index and field.
ModelSpec model_spec_from_json(const std::string& text, const std::string& source_name);

}  // namespace mfsdp
