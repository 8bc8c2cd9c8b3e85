// Writes a tensor's bytes raw (contiguous, native order) for the Python side of an optimizer parity test.
#pragma once

#include <ATen/core/Tensor.h>

#include <fstream>
#include <string>

namespace mfsdp::optim_parity {

inline void write_raw(const std::string& path, const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(c.const_data_ptr()), static_cast<std::streamsize>(c.nbytes()));
}

}  // namespace mfsdp::optim_parity
