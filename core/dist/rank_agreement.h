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

// Every rank passes its settings `mine` as text ("replicas 2, step mode dedup"); throws on every
// rank, naming each rank whose settings differ from rank 0's and both texts, unless all are equal.
// `what` names the settings in the message ("train: the HSDP mesh").
void check_same_settings(Communicator& comm, const std::string& what, const std::string& mine);

// Every rank passes its error ("" when fine); all throw together, naming the first failed rank,
// instead of the healthy ranks waiting in a collective the failed one never reaches.
void fail_together(Communicator& comm, const std::string& error, const std::string& what);

// The mean over ranks of each entry of `local` (every rank passes the same count): summed in rank
// order 0..W-1 in double, divided once by W; the same on every rank.
std::vector<double> mean_over_ranks(Communicator& comm, const std::vector<double>& local);
// The largest over ranks of each entry of `local` (the slowest rank's time, ...); the same on every rank.
std::vector<double> max_over_ranks(Communicator& comm, const std::vector<double>& local);

}  // namespace mfsdp
