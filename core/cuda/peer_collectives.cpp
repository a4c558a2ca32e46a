// Two-rank collectives over peer memory. Each rank owns one device allocation, exported by CUDA
// IPC: kSlots receive slots of kSlotBytes, then the flags its peer writes. Every op sends the peer
// the same number of bytes the peer sends it (all-reduce: the tensor; reduce-scatter: the peer's
// block; all-gather: this rank's block), in chunks of one slot, chunk number `seq` (counted per
// pair, the same on both ranks) into slot seq % kSlots:
//   copy stream: wait until the peer has freed the slot (freed[slot] >= seq - kSlots), copy the
//                chunk into the peer's slot (copy engine), then write the peer's ready[slot] = seq;
//   op stream:   wait for that copy (an all-reduce's add overwrites what it reads; and once the op
//                stream has passed an op, its inputs are free) and for the peer's chunk
//                (ready[slot] >= seq), consume the slot (add it into place, or copy it out), then
//                write the peer's freed[slot] = seq.
// The peer frees slots in seq order, so a wait for chunk c's slot covers every chunk before c: the
// first kSlots / 2 chunks of a tensor (a tensor-parallel activation of GPT-2 1.3B at micro-batch 8)
// wait once (peer_slot_waits.h). The flags are 32-bit stream memory operations
// (cuStreamWaitValue32 / cuStreamWriteValue32, fetched from the driver at run time so that nothing
// links libcuda); a write orders all earlier writes of its stream before it (the driver's default
// memory barrier). The copy of one chunk overlaps the consumption of the one before.
// Chunks of 8 MiB, one copy stream: each chunk costs ~10 us of stream operations beside its copy
// (memop_probe.cu), so smaller chunks were slower and more copy streams gained nothing
// (docs/benchmarks.md, eighth session). Alone the path is slower than NCCL; beside GEMMs it wins.
#include "core/cuda/peer_collectives.h"

#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda/cuda_state.h"
#include "core/cuda/launchers.h"
#include "core/cuda/peer_slot_waits.h"

namespace trellis {
namespace gpu {

namespace {

constexpr int kSlots = 8;
constexpr size_t kSlotBytes = size_t(8) << 20;
// Slots, then ready[] and freed[], then the direct gathers' go and landed flags, 64 bytes apart.
constexpr size_t kFlagsAt = kSlots * kSlotBytes;
constexpr size_t kRegionBytes = kFlagsAt + (2 * kSlots + 2) * 64;

using WaitValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using WriteValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using AddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

template <typename Fn>
Fn driver_function(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

void driver_check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) TRELLIS_FATAL(std::string("peer collectives: ") + what + " failed (CUresult " + std::to_string(int(r)) + ")");
}

}  // namespace
}  // namespace gpu

struct gpu::PeerCollectives {
  // A region of this rank's memory shared with the peer for direct gathers, and the peer's
  // matching region mapped here.
  struct Target {
    const char* local = nullptr;
    size_t bytes = 0;
    char* peer = nullptr;
    void* mapped = nullptr;  // the peer's allocation as opened (unmapped when its last target is dropped)
    cudaIpcMemHandle_t handle{};  // the peer's, to find a mapping already open
  };
  CudaState* cs = nullptr;
  MPI_Comm comm = MPI_COMM_NULL;      // the pair (the owning communicator's)
  int rank = 0;                       // in the pair
  cudaStream_t copy = nullptr;        // the copy engine's pushes
  cudaEvent_t forked = nullptr;       // the op stream's position, for the copy stream to start after
  cudaEvent_t pushed[kSlots] = {};    // a chunk's push done (this rank's x read)
  char* mine = nullptr;               // this rank's slots and flags
  char* peer = nullptr;               // the peer's, mapped here
  uint64_t seq = 0;                   // chunks sent so far (flags hold its low 32 bits)
  uint64_t last_seq[kSlots] = {};     // last chunk through each slot
  unsigned ready_wait = CU_STREAM_WAIT_VALUE_GEQ;  // with FLUSH where the device offers it
  WaitValueFn wait_value = nullptr;
  WriteValueFn write_value = nullptr;
  AddressRangeFn address_range = nullptr;
  std::vector<Target> targets;
  uint64_t gathers = 0;               // direct gathers so far (the go and landed flags hold it)
  cudaEvent_t gather_pushed = nullptr;

  const Target* target_of(const void* p, size_t bytes) const {
    for (const Target& t : targets)
      if (static_cast<const char*>(p) >= t.local && static_cast<const char*>(p) + bytes <= t.local + t.bytes) return &t;
    return nullptr;
  }

  char* slot(char* base, int s) const { return base + size_t(s) * kSlotBytes; }
  CUdeviceptr ready(char* base, int s) const { return CUdeviceptr(base + kFlagsAt + size_t(s) * 64); }
  CUdeviceptr freed(char* base, int s) const { return CUdeviceptr(base + kFlagsAt + size_t(kSlots + s) * 64); }
  // Written by the peer when its op stream reaches direct gather g: its target may be written.
  CUdeviceptr go(char* base) const { return CUdeviceptr(base + kFlagsAt + size_t(2 * kSlots) * 64); }
  // Written by the peer once its block of direct gather g has landed in this rank's target.
  CUdeviceptr landed(char* base) const { return CUdeviceptr(base + kFlagsAt + size_t(2 * kSlots + 1) * 64); }
};

namespace gpu {

PeerCollectives* peer_collectives_create(MPI_Comm comm, CudaState& cs) {
  int size = 0, rank = 0;
  TRELLIS_MPI_CHECK(MPI_Comm_size(comm, &size));
  TRELLIS_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  if (size != 2) return nullptr;
  MPI_Comm node = MPI_COMM_NULL;
  TRELLIS_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  int node_size = 0;
  TRELLIS_MPI_CHECK(MPI_Comm_size(node, &node_size));
  TRELLIS_MPI_CHECK(MPI_Comm_free(&node));

  // The peer's GPU by PCI bus id, so the ranks may number the GPUs differently; a rank that cannot
  // see the peer's GPU (its own CUDA_VISIBLE_DEVICES) leaves the pair on NCCL.
  char bus[2][64] = {};
  CUDA_CHECK(cudaDeviceGetPCIBusId(bus[rank], sizeof bus[rank], cs.device));
  TRELLIS_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, bus, int(sizeof bus[0]), MPI_CHAR, comm));
  int peer_device = -1, can_access = 0;
  if (node_size == 2) {
    if (cudaDeviceGetByPCIBusId(&peer_device, bus[1 - rank]) != cudaSuccess) {
      (void)cudaGetLastError();  // a peer GPU this process cannot see is not an error
      peer_device = -1;
    }
    if (peer_device >= 0 && peer_device != cs.device) CUDA_CHECK(cudaDeviceCanAccessPeer(&can_access, cs.device, peer_device));
  }
  auto wait_value = driver_function<WaitValueFn>("cuStreamWaitValue32");
  auto write_value = driver_function<WriteValueFn>("cuStreamWriteValue32");
  int ok = can_access && wait_value && write_value ? 1 : 0, all_ok = 0;
  // Made on the first all-reduce, often with the GPU nearly full: without room for the slots the
  // pair stays on NCCL rather than failing the run.
  void* region = nullptr;
  if (ok) {
    CUDA_CHECK(cudaSetDevice(cs.device));
    const cudaError_t e = cudaMalloc(&region, kRegionBytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      region = nullptr;
      ok = 0;
      std::fprintf(stderr, "warning: peer collectives: no room for its %zu MiB of receive slots on cuda:%d; this "
                           "group all-reduces through NCCL\n", kRegionBytes >> 20, cs.device);
    } else {
      CUDA_CHECK(e);
    }
  }
  TRELLIS_MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm));
  if (!all_ok) {
    if (region) CUDA_CHECK(cudaFree(region));
    return nullptr;
  }

  auto* p = new PeerCollectives();
  p->cs = &cs;
  p->comm = comm;
  p->rank = rank;
  p->address_range = driver_function<AddressRangeFn>("cuMemGetAddressRange");
  p->wait_value = wait_value;
  p->write_value = write_value;
  p->mine = static_cast<char*>(region);
  CUDA_CHECK(cudaStreamCreateWithFlags(&p->copy, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&p->forked, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&p->gather_pushed, cudaEventDisableTiming));
  for (cudaEvent_t& e : p->pushed) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CUDA_CHECK(cudaMemsetAsync(p->mine, 0, kRegionBytes, p->copy));
  CUDA_CHECK(cudaStreamSynchronize(p->copy));  // flags are zero before the peer may write them
  int flush = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&flush, cudaDevAttrCanFlushRemoteWrites, cs.device));
  // Where the device offers it (not the H200s of bench/sessions/2026-11-30e, call 7), the ready
  // wait also flushes remote writes, CUDA's documented guarantee that the peer's earlier writes are
  // visible after its flag; on the H200 the writer's barrier alone is relied on (comm_test checks the
  // sums bitwise).
  if (flush) p->ready_wait |= CU_STREAM_WAIT_VALUE_FLUSH;
  cudaIpcMemHandle_t handles[2];
  CUDA_CHECK(cudaIpcGetMemHandle(&handles[rank], p->mine));
  TRELLIS_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, handles, int(sizeof handles[0]), MPI_BYTE, comm));
  void* peer = nullptr;
  CUDA_CHECK(cudaIpcOpenMemHandle(&peer, handles[1 - rank], cudaIpcMemLazyEnablePeerAccess));
  p->peer = static_cast<char*>(peer);
  TRELLIS_MPI_CHECK(MPI_Barrier(comm));  // both regions zeroed and mapped before the first write
  return p;
}

namespace {

// Unmaps a target's peer allocation unless another target still uses it.
void close_mapping(PeerCollectives* p, const PeerCollectives::Target& t) {
  int users = 0;
  for (const PeerCollectives::Target& o : p->targets) users += o.mapped == t.mapped;
  if (users == 1) CUDA_CHECK(cudaIpcCloseMemHandle(t.mapped));
}

}  // namespace

void peer_collectives_destroy(PeerCollectives* p) {
  if (!p) return;
  CUDA_CHECK(cudaSetDevice(p->cs->device));
  // The peer frees a slot after reading it; once every slot is freed, the peer has no writes into
  // this rank's region in flight and its copies have read what they needed.
  for (int s = 0; s < kSlots; ++s)
    if (p->last_seq[s] > 0)
      driver_check(p->wait_value(CUstream(p->copy), p->freed(p->mine, s), uint32_t(p->last_seq[s]), CU_STREAM_WAIT_VALUE_GEQ),
                   "cuStreamWaitValue32");
  CUDA_CHECK(cudaStreamSynchronize(p->copy));
  CUDA_CHECK(cudaStreamSynchronize(p->cs->comm));
  while (!p->targets.empty()) {
    close_mapping(p, p->targets.back());
    p->targets.pop_back();
  }
  CUDA_CHECK(cudaIpcCloseMemHandle(p->peer));
  CUDA_CHECK(cudaFree(p->mine));
  CUDA_CHECK(cudaEventDestroy(p->gather_pushed));
  for (cudaEvent_t e : p->pushed) CUDA_CHECK(cudaEventDestroy(e));
  CUDA_CHECK(cudaEventDestroy(p->forked));
  CUDA_CHECK(cudaStreamDestroy(p->copy));
  delete p;
}

void peer_share_target(PeerCollectives* p, const Tensor& region) {
  struct Shared {
    cudaIpcMemHandle_t handle;
    uint64_t offset, bytes;
  } shared[2] = {};
  if (region.nbytes() > 0) {
    CUdeviceptr base = 0;
    size_t size = 0;
    if (!p->address_range) TRELLIS_FATAL("peer collectives: the driver has no cuMemGetAddressRange");
    driver_check(p->address_range(&base, &size, CUdeviceptr(region.data)), "cuMemGetAddressRange");
    CUDA_CHECK(cudaIpcGetMemHandle(&shared[p->rank].handle, reinterpret_cast<void*>(base)));
    shared[p->rank].offset = uint64_t(CUdeviceptr(region.data) - base);
    shared[p->rank].bytes = region.nbytes();
  }
  TRELLIS_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, shared, int(sizeof shared[0]), MPI_BYTE, p->comm));
  const Shared& theirs = shared[1 - p->rank];
  if (theirs.bytes != shared[p->rank].bytes)
    TRELLIS_FATAL("peer collectives: the two ranks shared gather targets of different sizes (" +
                  std::to_string(shared[p->rank].bytes) + " and " + std::to_string(theirs.bytes) + " bytes)");
  if (region.nbytes() == 0) return;
  PeerCollectives::Target t;
  t.local = static_cast<const char*>(region.data);
  t.bytes = region.nbytes();
  t.handle = theirs.handle;
  // A handle opens once per process: a second region of the same peer allocation reuses the mapping.
  for (const PeerCollectives::Target& o : p->targets)
    if (std::memcmp(&o.handle, &theirs.handle, sizeof theirs.handle) == 0) t.mapped = o.mapped;
  if (!t.mapped) CUDA_CHECK(cudaIpcOpenMemHandle(&t.mapped, theirs.handle, cudaIpcMemLazyEnablePeerAccess));
  t.peer = static_cast<char*>(t.mapped) + theirs.offset;
  p->targets.push_back(t);
}

void peer_drop_target(PeerCollectives* p, const Tensor& region) {
  for (auto it = p->targets.begin(); it != p->targets.end(); ++it)
    if (it->local == region.data && it->bytes == region.nbytes()) {
      CUDA_CHECK(cudaStreamSynchronize(p->cs->comm));  // every gather into it has landed
      CUDA_CHECK(cudaStreamSynchronize(p->copy));      // and every push of this rank into the peer's
      close_mapping(p, *it);
      p->targets.erase(it);
      return;
    }
}

bool peer_sums(DType t, bool sum) { return sum && (t == DType::f32 || t == DType::bf16 || t == DType::f16); }

namespace {

// Pushes `total` bytes from `src` to the peer, chunk by chunk, while the peer pushes as many to this
// rank; consume(offset, bytes, slot) is enqueued on `stream` for each chunk of the peer's once it
// has arrived in `slot`.
template <typename Consume>
void exchange(PeerCollectives* p, const char* src, size_t total, cudaStream_t stream, Consume&& consume) {
  if (total == 0) return;
  CUDA_CHECK(cudaEventRecord(p->forked, stream));
  CUDA_CHECK(cudaStreamWaitEvent(p->copy, p->forked, 0));
  // Host counts are 64-bit; the flags' 32-bit GEQ compares cyclically, fine while fewer than 2^31
  // chunks separate the two values.
  const uint64_t first = p->seq + 1, chunks = (total + kSlotBytes - 1) / kSlotBytes;
  for (size_t off = 0; off < total; off += kSlotBytes) {
    const size_t bytes = std::min(kSlotBytes, total - off);
    const uint64_t seq = ++p->seq;
    const uint32_t flag = uint32_t(seq);
    const int s = int(seq % kSlots);
    if (const auto w = slot_wait_before(seq, first, chunks, kSlots))
      driver_check(p->wait_value(CUstream(p->copy), p->freed(p->mine, int(w->slot_of % kSlots)), uint32_t(w->freed),
                                 CU_STREAM_WAIT_VALUE_GEQ),
                   "cuStreamWaitValue32");
    CUDA_CHECK(cudaMemcpyAsync(p->slot(p->peer, s), src + off, bytes, cudaMemcpyDeviceToDevice, p->copy));
    driver_check(p->write_value(CUstream(p->copy), p->ready(p->peer, s), flag, CU_STREAM_WRITE_VALUE_DEFAULT),
                 "cuStreamWriteValue32");
    CUDA_CHECK(cudaEventRecord(p->pushed[s], p->copy));

    CUDA_CHECK(cudaStreamWaitEvent(stream, p->pushed[s], 0));
    driver_check(p->wait_value(CUstream(stream), p->ready(p->mine, s), flag, p->ready_wait), "cuStreamWaitValue32");
    consume(off, bytes, p->slot(p->mine, s));
    driver_check(p->write_value(CUstream(stream), p->freed(p->peer, s), flag, CU_STREAM_WRITE_VALUE_DEFAULT),
                 "cuStreamWriteValue32");
    p->last_seq[s] = seq;
  }
}

// `in` (n bytes) into the peer's copy of `blocks` (2n bytes, inside target t) at this rank's block,
// straight from the copy engine, once the peer's op stream has reached this op (so, as with NCCL,
// nothing of the peer's before it still reads there); the peer's block lands in ours meanwhile.
void gather_direct(PeerCollectives* p, const PeerCollectives::Target& t, const char* blocks, const void* in, size_t n,
                   cudaStream_t stream) {
  const uint32_t g = uint32_t(++p->gathers);
  driver_check(p->write_value(CUstream(stream), p->go(p->peer), g, CU_STREAM_WRITE_VALUE_DEFAULT), "cuStreamWriteValue32");
  CUDA_CHECK(cudaEventRecord(p->forked, stream));
  CUDA_CHECK(cudaStreamWaitEvent(p->copy, p->forked, 0));
  driver_check(p->wait_value(CUstream(p->copy), p->go(p->mine), g, CU_STREAM_WAIT_VALUE_GEQ), "cuStreamWaitValue32");
  const size_t at = size_t(blocks - t.local) + size_t(p->rank) * n;
  CUDA_CHECK(cudaMemcpyAsync(t.peer + at, in, n, cudaMemcpyDeviceToDevice, p->copy));
  driver_check(p->write_value(CUstream(p->copy), p->landed(p->peer), g, CU_STREAM_WRITE_VALUE_DEFAULT), "cuStreamWriteValue32");
  CUDA_CHECK(cudaEventRecord(p->gather_pushed, p->copy));
  CUDA_CHECK(cudaStreamWaitEvent(stream, p->gather_pushed, 0));
  driver_check(p->wait_value(CUstream(stream), p->landed(p->mine), g, p->ready_wait), "cuStreamWaitValue32");
}

}  // namespace

void peer_all_reduce(PeerCollectives* p, const Tensor& x, cudaStream_t stream) {
  if (const PeerCollectives::Target* t = p->target_of(x.data, x.nbytes()); t && x.numel() % 2 == 0) {
    // Each rank sums one half (a reduce-scatter) and copies its sum into the peer's: half the adds
    // of summing the whole tensor on both ranks, the same bytes over the link, the same bits.
    const int64_t half = x.numel() / 2;
    const Tensor mine = x.slice(half * p->rank, {half});
    peer_reduce_scatter(p, mine, x, stream);
    gather_direct(p, *t, static_cast<const char*>(x.data), mine.data, mine.nbytes(), stream);
    return;
  }
  char* data = static_cast<char*>(x.data);
  const size_t esize = dtype_size(x.dtype);
  exchange(p, data, x.nbytes(), stream, [&](size_t off, size_t bytes, const char* slot) {
    launch_add(stream, data + off, data + off, slot, x.dtype, int64_t(bytes / esize));
  });
}

void peer_reduce_scatter(PeerCollectives* p, const Tensor& out, const Tensor& in, cudaStream_t stream) {
  const size_t n = out.nbytes(), esize = dtype_size(out.dtype);
  const char* blocks = static_cast<const char*>(in.data);
  char* dst = static_cast<char*>(out.data);
  const char* mine = blocks + size_t(p->rank) * n;
  exchange(p, blocks + size_t(1 - p->rank) * n, n, stream, [&](size_t off, size_t bytes, const char* slot) {
    launch_add(stream, dst + off, mine + off, slot, out.dtype, int64_t(bytes / esize));
  });
}

void peer_all_gather(PeerCollectives* p, const Tensor& out, const Tensor& in, cudaStream_t stream) {
  const size_t n = in.nbytes();
  char* blocks = static_cast<char*>(out.data);
  if (blocks + size_t(p->rank) * n != in.data)
    CUDA_CHECK(cudaMemcpyAsync(blocks + size_t(p->rank) * n, in.data, n, cudaMemcpyDeviceToDevice, stream));
  if (n == 0) return;
  if (const PeerCollectives::Target* t = p->target_of(out.data, out.nbytes())) {
    gather_direct(p, *t, blocks, in.data, n, stream);
    return;
  }
  char* theirs = blocks + size_t(1 - p->rank) * n;
  exchange(p, static_cast<const char*>(in.data), n, stream, [&](size_t off, size_t bytes, const char* slot) {
    CUDA_CHECK(cudaMemcpyAsync(theirs + off, slot, bytes, cudaMemcpyDeviceToDevice, stream));
  });
}

}  // namespace gpu
}  // namespace trellis
