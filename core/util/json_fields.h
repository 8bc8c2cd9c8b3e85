// Strict reading of JSON files written by this project (checkpoint layouts, plans): every field
// must exist with the expected type and range, and every error names the file and the field.
#pragma once

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace mfsdp {

// Throws "<kind>: '<path>': <where>: <what>".
[[noreturn]] inline void bad_json(const char* kind, const std::string& path, const std::string& where,
                                  const std::string& what) {
  TORCH_CHECK(false, kind, ": '", path, "': ", where, ": ", what);
}

// Strict field access: the field must exist with the expected JSON type.
struct JsonFields {
  const nlohmann::json& j;
  const std::string& path;
  std::string where;
  const char* kind;  // what the file is, first word of every error ("checkpoint")

  [[noreturn]] void bad(const std::string& at, const std::string& what) const { bad_json(kind, path, at, what); }

  const nlohmann::json& at(const char* key) const {
    if (!j.is_object()) bad(where, "is not an object");
    auto it = j.find(key);
    if (it == j.end()) bad(where, std::string("lacks the field \"") + key + "\"");
    return *it;
  }
  std::string in(const char* key) const { return where + "." + key; }
  int64_t integer(const char* key, int64_t lo = 0, int64_t hi = INT64_MAX) const {
    const nlohmann::json& v = at(key);
    if (!v.is_number_integer()) bad(in(key), "is not an integer");
    // Reading a large unsigned value as int64 would wrap; compare as unsigned first.
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      bad(in(key), "is out of range");
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi)
      bad(in(key), std::to_string(x) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
  }
  std::string string(const char* key) const {
    const nlohmann::json& v = at(key);
    if (!v.is_string()) bad(in(key), "is not a string");
    return v.get<std::string>();
  }
  const nlohmann::json& array(const char* key) const {
    const nlohmann::json& v = at(key);
    if (!v.is_array()) bad(in(key), "is not an array");
    return v;
  }
  const nlohmann::json& object(const char* key) const {
    const nlohmann::json& v = at(key);
    if (!v.is_object()) bad(in(key), "is not an object");
    return v;
  }
  double number(const char* key, double lo, double hi) const {
    const nlohmann::json& v = at(key);
    if (!v.is_number()) bad(in(key), "is not a number");
    const double x = v.get<double>();
    if (!(x >= lo && x <= hi)) bad(in(key), std::to_string(x) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
  }
  JsonFields fields(const char* key) const { return JsonFields{object(key), path, in(key), kind}; }
  JsonFields element(const char* key, size_t i) const {
    return JsonFields{array(key)[i], path, in(key) + "[" + std::to_string(i) + "]", kind};
  }
};

// Runs `f`, turning its c10::Error into one naming the file and the field.
template <typename F>
auto in_json_context(const char* kind, const std::string& path, const std::string& where, F&& f) {
  try {
    return f();
  } catch (const c10::Error& e) {
    bad_json(kind, path, where, e.what_without_backtrace());
  }
}

}  // namespace mfsdp
