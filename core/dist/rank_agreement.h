// Ranks agreeing on values and on failure, through the communicator (phase as the caller sets it).
// Every function is collective: every rank calls it, in the same order.
#pragma once

#include "core/dist/communicator.h"
#include "core/util/errors.h"

#include <exception>
#include <string>
#include <vector>

namespace mfsdp {

// Every rank's string, in rank order (lengths, then the bytes padded to the longest).
std::vector<std::string> allgather_strings(Communicator& comm, const std::string& mine);

// Every rank passes its error ("" when fine); all throw together, naming the first failed rank,
// instead of the healthy ranks waiting in a collective the failed one never reaches.
void fail_together(Communicator& comm, const std::string& error, const std::string& what);

// The mean over ranks of each entry of `local` (every rank passes the same count): summed in rank
// order 0..W-1 in double, divided once by W; the same on every rank.
std::vector<double> mean_over_ranks(Communicator& comm, const std::vector<double>& local);

// Runs `f`; returns its error message ("" when it succeeded), for fail_together.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    std::string m = error_message(e);
    return m.empty() ? std::string("unknown error") : m;
  }
  return "";
}

}  // namespace mfsdp
