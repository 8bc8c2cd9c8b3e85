// Quantities as people read them.
#pragma once

#include <string>

namespace mfsdp {

// "1.50 MiB": bytes in B, KiB, MiB or GiB with `decimals` digits (whole bytes below 1 KiB).
std::string human_bytes(double bytes, int decimals = 2);

}  // namespace mfsdp
