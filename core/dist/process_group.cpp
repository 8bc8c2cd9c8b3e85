#include "core/dist/process_group.h"

#include "core/dist/recording_backend.h"
#include "core/util/errors.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <c10/util/Exception.h>

#include <sstream>

namespace mfsdp {

const char* to_string(BackendKind kind) {
  switch (kind) {
    case BackendKind::gloo: return "gloo";
    case BackendKind::nccl: return "nccl";
  }
  TORCH_INTERNAL_ASSERT(false, "unknown BackendKind");
}

BackendKind backend_kind_from_string(const std::string& name) {
  if (name == "gloo") return BackendKind::gloo;
  if (name == "nccl") return BackendKind::nccl;
  TORCH_CHECK(false, "backend: unknown backend '", name, "' (expected gloo or nccl)");
}

std::string gloo_loopback_address() {
  if (const char* a = std::getenv("MFSDP_GLOO_ADDR"); a && *a) return a;
  // Not cached: a forked child computes its own. pid_max is at most 2^22 on Linux, so A is 1..64
  // and never 0: no pid maps to 127.0.0.x, where the TCP store and everything else listen.
  const auto p = static_cast<unsigned>(::getpid());
  return "127." + std::to_string(1 + ((p >> 16) & 63u)) + "." + std::to_string((p >> 8) & 255u) + "." +
         std::to_string(p & 255u);
}

c10::intrusive_ptr<c10d::Backend> detail::make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int world_size,
                                                    std::chrono::milliseconds timeout) {
  TORCH_CHECK(world_size >= 1, "gloo: world size must be >= 1, got ", world_size);
  TORCH_CHECK(rank >= 0 && rank < world_size, "gloo: rank ", rank, " outside [0, ", world_size, ")");
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(gloo_loopback_address()));
  options->threads = 1;
  try {
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "gloo: rank ", rank, " of ", world_size,
                " could not join the process group within ", timeout.count(),
                " ms (are all ranks started?): ", error_message(e));
  }
}

c10::intrusive_ptr<c10d::Backend> make_backend(BackendKind kind,
                                               const c10::intrusive_ptr<c10d::Store>& store,
                                               int rank, int world_size,
                                               std::chrono::milliseconds timeout) {
  switch (kind) {
    case BackendKind::gloo: return recording(detail::make_gloo_backend(store, rank, world_size, timeout));
    case BackendKind::nccl: return recording(detail::make_nccl_backend(store, rank, world_size, timeout));
  }
  TORCH_INTERNAL_ASSERT(false, "unknown BackendKind");
}

c10::intrusive_ptr<c10d::Store> make_tcp_store(const std::string& host, std::uint16_t port,
                                               bool is_server, int world_size,
                                               std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = port;
  opts.isServer = is_server;
  opts.numWorkers = std::nullopt;  // ranks meet in the process group's rendezvous instead
  opts.waitWorkers = false;
  opts.timeout = timeout;
  try {
    return c10::make_intrusive<c10d::TCPStore>(host, opts);
  } catch (const std::exception& e) {
    std::ostringstream msg;
    if (is_server) {
      msg << "store: could not start the TCP store server on " << host << ":" << port << ": "
          << error_message(e);
    } else {
      msg << "store: could not reach the TCP store at " << host << ":" << port << " within "
          << timeout.count() << " ms (is rank 0 / the launcher running there?): " << error_message(e);
    }
    TORCH_CHECK(false, msg.str());
  }
}

std::uint16_t tcp_store_port(const c10::intrusive_ptr<c10d::Store>& store) {
  auto* tcp = dynamic_cast<c10d::TCPStore*>(store.get());
  TORCH_CHECK(tcp != nullptr, "store: not a TCP store");
  return tcp->getPort();
}

c10::intrusive_ptr<c10d::Store> make_hash_store(std::chrono::milliseconds timeout) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  store->setTimeout(timeout);
  return store;
}

}  // namespace mfsdp
