// CRC32C (Castagnoli) checksums for checkpoint files: SSE4.2 instructions where the CPU has
// them (several GB/s), a portable slicing-by-8 table otherwise. Detects accidental corruption,
// not tampering.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace trellis {

// Continues a CRC32C over `n` more bytes. Start with crc = 0; the result of one call is the
// `crc` argument of the next, so a stream checksummed in pieces equals one call on the whole.
// crc32c_update(0, "123456789", 9) == 0xE3069283.
uint32_t crc32c_update(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32c(const void* data, size_t n) { return crc32c_update(0, data, n); }

// Eight lowercase hex digits, as stored in manifests.
std::string crc32c_hex(uint32_t crc);

}  // namespace trellis
