// What the optimizer parity dumps share: their one argument (the output directory), and writing a
// tensor's bytes raw (contiguous, native order) for the Python side of the test.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace mfsdp::optim_parity {

// The dump's output directory, its only argument; otherwise the usage line and exit status 2.
inline std::string out_dir_arg(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    std::exit(2);
  }
  return argv[1];
}

inline void write_raw(const std::string& path, const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(c.const_data_ptr()), static_cast<std::streamsize>(c.nbytes()));
}

}  // namespace mfsdp::optim_parity
