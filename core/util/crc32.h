// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320): the value zlib.crc32 and binascii.crc32
// compute, so Python can check what the checkpoints and goldens record.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mfsdp {

// Continues from `crc` (0 to start): crc32(b, m, crc32(a, n)) == crc32 of a followed by b.
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

}  // namespace mfsdp
