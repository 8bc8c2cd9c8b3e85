// Compiles against the wheel's headers (the CUDA and NCCL ones where torch has CUDA) and links
// libtorch, with no CUDA toolkit on the machine: what every target of the project needs.
#include <ATen/ops/ones.h>

#ifdef USE_C10D_NCCL
#include <ATen/cuda/CUDAContext.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdio>

int main() {
  const double sum = at::ones({3}).sum().item<double>();
#ifdef USE_C10D_NCCL
  const bool cuda = at::cuda::is_available();
  std::printf("torch link probe: sum %g, built with CUDA, %s\n", sum, cuda ? "a GPU is visible" : "no GPU visible");
#else
  std::printf("torch link probe: sum %g, built without CUDA\n", sum);
#endif
  return sum == 3 ? 0 : 1;
}
