// Creating c10d stores and backends (Gloo on CPU, NCCL on GPU) with errors that say what failed.
//
// Everything the runtime sends goes through a c10d::Backend made here. Gloo's own headers are
// needed only inside process_group.cpp, so the rest of the project includes just c10d's Backend.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace mfsdp {

enum class BackendKind {
  gloo,  // CPU tensors (and CUDA tensors staged through host memory)
  nccl,  // CUDA tensors, one GPU per rank
};

const char* to_string(BackendKind kind);
BackendKind backend_kind_from_string(const std::string& name);  // throws on unknown names

// Whether this build of libtorch can create the NCCL backend (compiled in and a GPU visible).
bool nccl_available();

// The backend of `rank` of `world_size` over `store`: Gloo bound to 127.0.0.1, or NCCL on the
// current CUDA device (a clear error where NCCL is missing). Returns only once every rank of the
// group has constructed its backend (so no rank tears the group down while a slower one is still
// connecting), or fails after `timeout` naming which ranks started joining and which joined; the timeout also bounds every collective issued on it. What it returns is a
// RecordingBackend (recording_backend.h) around the real one, which is reachable from nowhere
// else: every collective of the project is recorded with its phase.
c10::intrusive_ptr<c10d::Backend> make_backend(BackendKind kind,
                                               const c10::intrusive_ptr<c10d::Store>& store,
                                               int rank, int world_size,
                                               std::chrono::milliseconds timeout);

// The loopback address this process's Gloo devices listen on: 127.A.B.C derived from the pid
// (A in 1..64), or $MFSDP_GLOO_ADDR. Gloo routes an incoming connection to a pair by a bare 8-byte
// sequence number that is the same small integer in every process, so a stray connection from
// another process (a survivor of a killed rank dialling a port that was freed and re-bound, a
// peer of a broken group elsewhere on the machine) into a listener on the shared 127.0.0.1 was
// taken as a peer and broke the mesh ("Connection closed by peer"). With one address per live
// process, a dial meant for another process's freed port is refused instead. The TCP store
// stays on 127.0.0.1 (docs/gloo-notes.md).
std::string gloo_loopback_address();

// Only make_backend calls these (they return the bare backend).
namespace detail {
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                                                    std::chrono::milliseconds timeout);
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                                                    std::chrono::milliseconds timeout);
}  // namespace detail

// A TCP store on `host:port`. The server side (is_server) binds (port 0 = ephemeral, read back
// with tcp_store_port); clients connect, retrying until `timeout`, and on failure throw an error
// naming the address and the timeout.
c10::intrusive_ptr<c10d::Store> make_tcp_store(const std::string& host, std::uint16_t port,
                                               bool is_server, int world_size,
                                               std::chrono::milliseconds timeout);
std::uint16_t tcp_store_port(const c10::intrusive_ptr<c10d::Store>& store);

// The compute device of `rank` for a device kind ("cpu" or "cuda"). For cuda: GPU rank % device
// count, made current for the calling thread (so ranks as threads each bind their own). Throws
// naming the rank when no GPU is visible.
at::Device rank_device(const std::string& kind, int rank);
// The calling thread's current CUDA device (throws where CUDA is not compiled in).
at::Device current_cuda_device();

// A fresh in-memory store for ranks that are threads of one process.
c10::intrusive_ptr<c10d::Store> make_hash_store(std::chrono::milliseconds timeout);

}  // namespace mfsdp
