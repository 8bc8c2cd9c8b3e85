#include "core/util/errors.h"

#include <c10/util/Exception.h>

namespace mfsdp {

std::string error_message(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return c10_error->what_without_backtrace();
  }
  return e.what();
}

}  // namespace mfsdp

#include <c10/util/Logging.h>

#include <cstdlib>

namespace mfsdp {

void quiet_c10_logs() {
  if (std::getenv("TORCH_CPP_LOG_LEVEL") == nullptr) FLAGS_caffe2_log_level = 3;  // FATAL only
}

}  // namespace mfsdp
