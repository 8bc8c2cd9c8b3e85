// The safetensors format's dtype names ("F32", "BF16", ...): what checkpoints, plan JSON and the
// safetensors files record. One table, both ways.
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

namespace mfsdp {

// Throw on dtypes the format does not name.
const char* safetensors_dtype(c10::ScalarType dtype);
c10::ScalarType dtype_from_safetensors(const std::string& name);

}  // namespace mfsdp
