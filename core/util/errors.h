// Turning exceptions into one readable message (c10::Error without its C++ backtrace).
#pragma once

#include <exception>
#include <string>

namespace mfsdp {

std::string error_message(const std::exception& e);

// Runs `f`; returns its error message ("" when it succeeded): for fail_together
// (core/dist/rank_agreement.h) and for tests that check what an error says.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    std::string m = error_message(e);
    return m.empty() ? std::string("unknown error") : m;
  }
  return "";
}

}  // namespace mfsdp

namespace mfsdp {

// Silences c10's own warning/error log lines (c10d prints every retry with a C++ backtrace) unless
// TORCH_CPP_LOG_LEVEL is set; the errors that matter reach the user as exceptions with context.
void quiet_c10_logs();

}  // namespace mfsdp
