// The determinism switch (docs/architecture.md, determinism): one intra-op thread per rank and per-rank generators.
#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>

namespace mfsdp {

enum class Determinism {
  deterministic,  // one intra-op thread; sums in a fixed order: runs are bit-reproducible
  fast,           // library defaults (thread pools, native reductions)
};

// Applies the mode to the calling thread (and, for `deterministic`, to ATen's intra-op pool, so
// threads created later start with one thread too). Idempotent.
void apply_determinism(Determinism mode);

// For CUDA runs in deterministic mode: ATen's deterministic algorithms (an op without one
// throws instead of silently differing) and a fixed cuBLAS workspace (CUBLAS_WORKSPACE_CONFIG,
// unless already set; call before the first CUDA matmul). Idempotent; a no-op for `fast`.
void apply_cuda_determinism(Determinism mode);

// A CPU generator private to one rank, seeded from (seed, rank) so ranks draw independent
// streams and no rank touches the process-global default generator.
at::Generator make_rank_generator(std::uint64_t seed, int rank);

// The generator every rank uses for something that must be identical on all ranks (the model's
// initial weights): depends on the seed alone.
at::Generator make_shared_generator(std::uint64_t seed);

}  // namespace mfsdp
