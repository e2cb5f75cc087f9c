#ifndef LOOM_RUNTIME_SUPPORT_CRC32C_H
#define LOOM_RUNTIME_SUPPORT_CRC32C_H

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of
// .loomx sections. crc32c("123456789") == 0xE3069283.

#include <cstddef>
#include <cstdint>

namespace loom {

/// Extends `crc` (0 for a fresh checksum) over `size` bytes.
uint32_t crc32c(const void *bytes, size_t size, uint32_t crc = 0);

} // namespace loom

#endif
