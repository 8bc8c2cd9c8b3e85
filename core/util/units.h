// Quantities as people read them.
#pragma once

#include <cstdio>
#include <string>

namespace mfsdp {

// printf's formatting into a std::string (the arguments as std::snprintf takes them).
std::string format(const char* fmt, auto... args) {
  const int n = std::snprintf(nullptr, 0, fmt, args...);
  std::string out(static_cast<size_t>(n), '\0');
  std::snprintf(out.data(), out.size() + 1, fmt, args...);
  return out;
}

// "1.50 MiB": bytes in B, KiB, MiB or GiB with `decimals` digits (whole bytes below 1 KiB).
std::string human_bytes(double bytes, int decimals = 2);

}  // namespace mfsdp
