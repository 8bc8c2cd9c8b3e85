#include "core/dist/determinism.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <cstdlib>

namespace mfsdp {

void apply_determinism(Determinism mode) {
  if (mode == Determinism::deterministic) {
    if (at::get_num_threads() != 1) at::set_num_threads(1);
  }
}

void apply_cuda_determinism(Determinism mode) {
  if (mode != Determinism::deterministic) return;
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
}

namespace {
// splitmix64: a bijective mix so (seed, rank) pairs give well-separated generator seeds.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

at::Generator make_rank_generator(std::uint64_t seed, int rank) {
  return at::make_generator<at::CPUGeneratorImpl>(mix(mix(seed) + static_cast<std::uint64_t>(rank) + 1));
}

at::Generator make_shared_generator(std::uint64_t seed) {
  return at::make_generator<at::CPUGeneratorImpl>(mix(seed));
}

}  // namespace mfsdp
