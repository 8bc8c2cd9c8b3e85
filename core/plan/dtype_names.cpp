#include "core/plan/dtype_names.h"

#include "core/util/enum_names.h"

#include <c10/util/Exception.h>

namespace mfsdp {
namespace {

constexpr NameTable<c10::ScalarType, 10> kSafetensorsDtypes{{{c10::kDouble, "F64"},
                                                            {c10::kFloat, "F32"},
                                                            {c10::kHalf, "F16"},
                                                            {c10::kBFloat16, "BF16"},
                                                            {c10::kLong, "I64"},
                                                            {c10::kInt, "I32"},
                                                            {c10::kShort, "I16"},
                                                            {c10::kChar, "I8"},
                                                            {c10::kByte, "U8"},
                                                            {c10::kBool, "BOOL"}}};

}  // namespace

const char* safetensors_dtype(c10::ScalarType dtype) {
  const char* name = name_in(kSafetensorsDtypes, dtype);
  TORCH_CHECK(name, "safetensors: dtype ", c10::toString(dtype), " is not supported");
  return name;
}

c10::ScalarType dtype_from_safetensors(const std::string& name) {
  auto t = value_in(kSafetensorsDtypes, name);
  TORCH_CHECK(t, "safetensors: unknown or unsupported dtype '", name, "'");
  return *t;
}

}  // namespace mfsdp
