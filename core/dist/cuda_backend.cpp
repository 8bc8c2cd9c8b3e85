// The NCCL backend and the CUDA device helpers live in their own translation unit: they need CUDA
// and NCCL headers, which the rest of the project does not. It compiles wherever libtorch was built with NCCL (the PyPI wheel
// is), even on machines without a GPU; creating it needs a GPU.
#include "core/dist/process_group.h"

#include <c10/util/Exception.h>

#ifdef USE_C10D_NCCL
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace mfsdp {

at::Device rank_device(const std::string& kind, int rank) {
  if (kind == "cpu") return at::kCPU;
  TORCH_CHECK(kind == "cuda", "device '", kind, "' is not supported (cpu, cuda)");
#ifdef USE_C10D_NCCL
  TORCH_CHECK(at::cuda::is_available(), "device cuda: rank ", rank,
              ": no CUDA device is visible (torch.cuda.is_available() is false); use --device cpu");
  const auto index = static_cast<c10::DeviceIndex>(rank % at::cuda::device_count());
  c10::cuda::set_device(index);  // for this thread: ranks as threads each bind their own
  return at::Device(at::kCUDA, index);
#else
  TORCH_CHECK(false, "device cuda: this libtorch was built without CUDA");
#endif
}

at::Device current_cuda_device() {
#ifdef USE_C10D_NCCL
  return at::Device(at::kCUDA, c10::cuda::current_device());
#else
  TORCH_CHECK(false, "this libtorch was built without CUDA");
#endif
}

bool nccl_available() {
#ifdef USE_C10D_NCCL
  return at::cuda::is_available();
#else
  return false;
#endif
}

c10::intrusive_ptr<c10d::Backend> detail::make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int world_size,
                                                    std::chrono::milliseconds timeout) {
#ifdef USE_C10D_NCCL
  TORCH_CHECK(at::cuda::is_available(),
              "nccl: rank ", rank, ": no CUDA device is visible; use --backend gloo on CPU");
  TORCH_CHECK(world_size <= at::cuda::device_count(), "nccl: world size ", world_size,
              " needs one GPU per rank but only ", at::cuda::device_count(),
              " are visible (NCCL refuses two ranks on one GPU); use gloo for multi-rank on one GPU");
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(rank % at::cuda::device_count()));
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
#else
  TORCH_CHECK(false, "nccl: this libtorch was built without NCCL (USE_C10D_NCCL undefined)");
#endif
}

}  // namespace mfsdp
