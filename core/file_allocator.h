// Host memory backed by files on a fast local disk (NVMe offload): each block is a temporary file in
// a directory, mapped shared, so the kernel writes its pages to that disk and drops them from
// memory when memory runs short, instead of the block needing RAM (or swap) of its size.
#pragma once
#include <memory>
#include <string>

#include "core/alloc.h"

namespace trellis {

// Each file is created with mkstemp in `dir`, unlinked at once (nothing is left behind, even by a
// killed run, and no existing file is touched) and its blocks reserved with posix_fallocate, so a
// full disk fails the allocation instead of a later write through the mapping.
std::unique_ptr<Allocator> make_file_backed_allocator(const std::string& dir);

// Bytes free for an unprivileged writer on the filesystem holding `dir`; 0 when unknown.
size_t free_disk_bytes(const std::string& dir);

}  // namespace trellis
