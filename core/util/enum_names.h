// One name table per enum: to_string and from_string of an enum are both read from it, so a name
// is written once. Tables are constexpr arrays of {value, name} in the order they are listed to users.
#pragma once

#include <c10/util/Exception.h>

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace mfsdp {

template <typename E, size_t N>
using NameTable = std::array<std::pair<E, const char*>, N>;

// The name of `value`; nullptr when the table lacks it (callers assert).
template <typename E, size_t N>
constexpr const char* name_in(const NameTable<E, N>& table, E value) {
  for (const auto& [v, name] : table)
    if (v == value) return name;
  return nullptr;
}

template <typename E, size_t N>
std::optional<E> value_in(const NameTable<E, N>& table, std::string_view name) {
  for (const auto& [v, n] : table)
    if (name == n) return v;
  return std::nullopt;
}

// "a, b, c" in table order, for error messages and --help.
template <typename E, size_t N>
std::string names_of(const NameTable<E, N>& table, const char* separator = ", ") {
  std::string out;
  for (const auto& [v, n] : table) out += (out.empty() ? "" : separator) + std::string(n);
  return out;
}

// "a, b or c" in table order.
template <typename E, size_t N>
std::string names_or(const NameTable<E, N>& table) {
  std::string out;
  for (size_t i = 0; i < N; ++i) out += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + std::string(table[i].second);
  return out;
}

// The name of `value`; a value missing from its table is a bug, not an input error.
template <typename E, size_t N>
const char* checked_name(const NameTable<E, N>& table, E value) {
  const char* name = name_in(table, value);
  TORCH_INTERNAL_ASSERT(name, "an enum value has no name in its table");
  return name;
}

// The value named `name`; throws "unknown <what> 'name' (expected a, b or c)".
template <typename E, size_t N>
E parse_name(const NameTable<E, N>& table, const std::string& name, const char* what) {
  auto v = value_in(table, name);
  TORCH_CHECK(v, "unknown ", what, " '", name, "' (expected ", names_or(table), ")");
  return *v;
}

}  // namespace mfsdp
