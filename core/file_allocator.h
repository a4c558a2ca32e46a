// Host memory backed by files on a fast local disk (NVMe offload): each block is a temporary file in
// a directory, mapped shared, so the kernel writes its pages to that disk and drops them from
// memory when memory runs short, instead of the block needing RAM (or swap) of its size.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "core/alloc.h"

namespace trellis {

// Each file is anonymous (O_TMPFILE; where the filesystem lacks it, mkstemp and an unlink at once:
// no existing file is touched, and nothing is left behind once the process ends) and its blocks are
// reserved with posix_fallocate, so on ext4 or xfs a full disk fails the allocation instead of a
// later write through the mapping. On copy-on-write filesystems (btrfs, ZFS) a write can still
// find the disk full (SIGBUS), on NFS write-back errors may go unseen, and on tmpfs the files are
// memory: use a local ext4/xfs disk.
std::unique_ptr<Allocator> make_file_backed_allocator(const std::string& dir);

// Bytes free for an unprivileged writer on the filesystem holding `dir`; none when unknown.
std::optional<size_t> free_disk_bytes(const std::string& dir);

}  // namespace trellis
