#include "core/dist/process_group.h"

#include "core/dist/recording_backend.h"
#include "core/util/errors.h"

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

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
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
}

namespace {

// The keys of the join protocol, beside the backend's own keys in the group's store.
std::string join_key(const char* what, int rank) { return std::string("mfsdp_join/") + what + "/" + std::to_string(rank); }

// Which ranks have set `what`, as "0, 2, 3" (or "none").
std::string ranks_with(c10d::Store& store, const char* what, int world_size, bool with) {
  std::string out;
  for (int r = 0; r < world_size; ++r)
    if (store.check({join_key(what, r)}) == with) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out.empty() ? "none" : out;
}

// Every rank's state when joining failed: who started joining, who finished, who is missing.
std::string join_states(c10d::Store& store, int world_size) {
  try {
    return "started joining: " + ranks_with(store, "started", world_size, true) +
           "; joined: " + ranks_with(store, "joined", world_size, true) +
           "; not joined: " + ranks_with(store, "joined", world_size, false);
  } catch (const std::exception& e) {
    return std::string("the store could not say which ranks joined (") + error_message(e) + ")";
  }
}

}  // namespace

// Joining is a protocol of its own around the backend's construction. Gloo's connectFullMesh
// returns on a rank as soon as that rank's own pairs are connected, while a slower peer may still
// be connecting its later pairs; a rank that then tears its group down (a test body that returns
// at once, a rank that failed) closes sockets the slower peer is still waiting on, and that peer
// fails with "Connection closed by peer" (seen under load: docs/gloo-notes.md). So no rank
// returns from make_backend until every rank of the group has constructed its backend, and a
// failure names every rank's state instead of Gloo's bare connect error.
c10::intrusive_ptr<c10d::Backend> make_backend(BackendKind kind,
                                               const c10::intrusive_ptr<c10d::Store>& store,
                                               int rank, int world_size,
                                               std::chrono::milliseconds timeout) {
  store->set(join_key("started", rank), "1");
  c10::intrusive_ptr<c10d::Backend> backend;
  try {
    backend = kind == BackendKind::gloo ? detail::make_gloo_backend(store, rank, world_size, timeout)
                                        : detail::make_nccl_backend(store, rank, world_size, timeout);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, to_string(kind), ": rank ", rank, " of ", world_size, " could not join the process group within ",
                timeout.count(), " ms (", join_states(*store, world_size), "): ", error_message(e));
  }
  store->set(join_key("joined", rank), "1");
  std::vector<std::string> everyone;
  for (int r = 0; r < world_size; ++r) everyone.push_back(join_key("joined", r));
  try {
    store->wait(everyone, timeout);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, to_string(kind), ": rank ", rank, " of ", world_size, " joined the process group, but not every rank did within ",
                timeout.count(), " ms (", join_states(*store, world_size), ")");
  }
  return recording(std::move(backend));
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
