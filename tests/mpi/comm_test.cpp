// Communicator and ProcessGroups under mpirun, nccl-tests style: inputs are derived from
// (seed, rank, index), so every rank computes every expected value itself. Each operation runs
// sync and async on host tensors (MPI) and, when every local rank has a GPU, on device tensors
// (NCCL, or for sums at two ranks the peer path; otherwise those tests skip and say why).
// NcclBandwidth.AllReduce256MiB prints the all-reduce bus bandwidth (not asserted).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/alloc.h"
#include "core/comm.h"
#include "core/ops.h"
#include "core/process_groups.h"
#include "core/runtime.h"

namespace trellis {
namespace {

constexpr DType kAllDtypes[] = {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8};

int world_rank() { int r = 0; MPI_Comm_rank(MPI_COMM_WORLD, &r); return r; }
int world_size() { int n = 1; MPI_Comm_size(MPI_COMM_WORLD, &n); return n; }

// Small integers, exact in every dtype and in sums over up to 16 ranks: [0, 8) for u8, else [-8, 8).
int64_t val(DType t, int seed, int rank, int64_t i) {
  uint64_t z = uint64_t(seed) * 0x9E3779B97F4A7C15ull + uint64_t(rank) * 0xBF58476D1CE4E5B9ull + uint64_t(i);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return t == DType::u8 ? int64_t(z % 8) : int64_t(z % 16) - 8;
}

// Where a run's tensors live: host memory, or this rank's GPU.
struct Backend {
  std::unique_ptr<Runtime> rt;
  bool device = false;
};

// Local ranks of this node, and whether every rank of the job has a GPU of its own.
bool gpus_for_every_local_rank(int* local_rank, std::string* why) {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank(), MPI_INFO_NULL, &node);
  int local_size = 1;
  MPI_Comm_rank(node, local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  const int gpus = cuda_device_count();
  int ok = gpus >= local_size ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);  // skip on every rank or none
  if (!all_ok)
    *why = built_with_cuda() ? std::to_string(local_size) + " local ranks but " + std::to_string(gpus) +
                                   " visible GPU(s) on some node"
                             : "built without CUDA";
  return all_ok != 0;
}

// peer: RuntimeOptions::peer_collectives (device sums and gathers at two ranks through peer memory).
Backend make_backend(bool device, bool peer = true) {
  Backend b;
  b.device = device;
  RuntimeOptions opt;
  opt.cpu_threads = 1;
  opt.peer_collectives = peer;
  if (device) {
    int local = 0;
    std::string why;
    gpus_for_every_local_rank(&local, &why);
    opt.device = Device::CUDA(local);
  }
  b.rt = std::make_unique<Runtime>(opt);
  return b;
}

// A tensor the communicator sees (host or device) with a host mirror to fill and check.
class Staged {
 public:
  Staged(Backend& b, DType t, int64_t n)
      : rt_(*b.rt), host_(size_t(n) * dtype_size(t)), host_t_(host_.data(), t, Device::CPU(), Shape{n}) {
    if (b.device) {
      dev_ = Buffer(rt_.allocator(), host_.size() ? host_.size() : 1, "comm test");
      dev_t_ = dev_.tensor(t, Shape{n});
    }
  }
  const Tensor& t() const { return dev_t_.defined() ? dev_t_ : host_t_; }
  int64_t numel() const { return host_t_.numel(); }
  void set(int64_t i, int64_t v) {
    void* p = host_.data();
    switch (host_t_.dtype) {
      case DType::f32: static_cast<float*>(p)[i] = float(v); break;
      case DType::bf16: static_cast<bf16_t*>(p)[i] = to_bf16(float(v)); break;
      case DType::f16: static_cast<f16_t*>(p)[i] = to_f16(float(v)); break;
      case DType::i32: static_cast<int32_t*>(p)[i] = int32_t(v); break;
      case DType::i64: static_cast<int64_t*>(p)[i] = v; break;
      case DType::u8: static_cast<uint8_t*>(p)[i] = uint8_t(v); break;
    }
  }
  int64_t get(int64_t i) const {
    const void* p = host_.data();
    switch (host_t_.dtype) {
      case DType::f32: return int64_t(static_cast<const float*>(p)[i]);
      case DType::bf16: return int64_t(to_float(static_cast<const bf16_t*>(p)[i]));
      case DType::f16: return int64_t(to_float(static_cast<const f16_t*>(p)[i]));
      case DType::i32: return static_cast<const int32_t*>(p)[i];
      case DType::i64: return static_cast<const int64_t*>(p)[i];
      case DType::u8: return static_cast<const uint8_t*>(p)[i];
    }
    return 0;
  }
  // Fill from the seed: element i = val(seed, rank, offset(i)).
  template <typename F> void fill(F&& f) {
    for (int64_t i = 0; i < numel(); ++i) set(i, f(i));
    if (dev_t_.defined()) copy(rt_, dev_t_, host_t_);  // compute stream: ordered before the op
  }
  // Brings the result back (after the op's wait(), on the compute stream) and checks it.
  template <typename F> int64_t count_errors(F&& expected, const std::string& what) {
    if (dev_t_.defined()) copy(rt_, host_t_, dev_t_);
    rt_.synchronize();
    int64_t errors = 0;
    for (int64_t i = 0; i < numel(); ++i) {
      if (get(i) != expected(i)) {
        if (errors < 3)
          ADD_FAILURE() << "[rank " << world_rank() << "] " << what << " " << dtype_name(host_t_.dtype) << " element "
                        << i << ": got " << get(i) << ", expected " << expected(i);
        ++errors;
      }
    }
    return errors;
  }

 private:
  Runtime& rt_;
  std::vector<unsigned char> host_;
  Tensor host_t_;
  Buffer dev_;
  Tensor dev_t_;
};

int64_t reduce_over(int size, ReduceOp op, auto&& f) {
  int64_t acc = f(0);
  for (int r = 1; r < size; ++r) acc = op == ReduceOp::sum ? acc + f(r) : std::max(acc, f(r));
  return acc;
}

// ---- the operations, one function each, for either backend ----

void check_all_reduce(Backend& b, Communicator& c) {
  const int n = 1031, R = c.rank(), N = c.size();
  for (DType t : kAllDtypes)
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max})
      for (int mode : {0, 1, 2}) {
        // 1, 2: two in flight at once, waited in reverse order (1) or absorbed into one handle (2).
        const bool async = mode > 0;
        Staged x(b, t, n), y(b, t, n);
        x.fill([&](int64_t i) { return val(t, 1, R, i); });
        y.fill([&](int64_t i) { return val(t, 2, R, i); });
        if (async) {
          CommHandle hx = c.all_reduce_async(x.t(), op);
          CommHandle hy = c.all_reduce_async(y.t(), op);
          if (mode == 2) {
            hx.absorb(std::move(hy));
            EXPECT_FALSE(hy.pending());
          }
          hy.wait();
          hx.wait();
        } else {
          c.all_reduce(x.t(), op);
          c.all_reduce(y.t(), op);
        }
        const std::string what = std::string("all_reduce ") + (op == ReduceOp::sum ? "sum" : "max") +
                                 (mode == 1 ? " async" : mode == 2 ? " async, absorbed" : "");
        x.count_errors([&](int64_t i) { return reduce_over(N, op, [&](int r) { return val(t, 1, r, i); }); }, what);
        y.count_errors([&](int64_t i) { return reduce_over(N, op, [&](int r) { return val(t, 2, r, i); }); }, what);
      }
}

void check_reduce_scatter(Backend& b, Communicator& c) {
  const int n = 257, R = c.rank(), N = c.size();
  for (DType t : kAllDtypes)
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max})
      for (bool async : {false, true}) {
        Staged in(b, t, int64_t(n) * N), out(b, t, n);
        in.fill([&](int64_t i) { return val(t, 3, R, i); });
        if (async) c.reduce_scatter_async(out.t(), in.t(), op).wait();
        else c.reduce_scatter(out.t(), in.t(), op);
        out.count_errors(
            [&](int64_t i) { return reduce_over(N, op, [&](int r) { return val(t, 3, r, int64_t(R) * n + i); }); },
            async ? "reduce_scatter async" : "reduce_scatter");
      }
}

void check_all_gather(Backend& b, Communicator& c) {
  const int n = 333, R = c.rank(), N = c.size();
  for (DType t : kAllDtypes)
    for (bool async : {false, true}) {
      Staged in(b, t, n), out(b, t, int64_t(n) * N);
      in.fill([&](int64_t i) { return val(t, 4, R, i); });
      if (async) c.all_gather_async(out.t(), in.t()).wait();
      else c.all_gather(out.t(), in.t());
      out.count_errors([&](int64_t i) { return val(t, 4, int(i / n), i % n); }, async ? "all_gather async" : "all_gather");
    }
}

void check_broadcast(Backend& b, Communicator& c) {
  const int n = 777, R = c.rank();
  for (DType t : {DType::f32, DType::bf16, DType::i64, DType::u8})
    for (int root = 0; root < c.size(); ++root)
      for (bool async : {false, true}) {
        Staged x(b, t, n);
        x.fill([&](int64_t i) { return val(t, 5 + root, R, i); });
        if (async) c.broadcast_async(x.t(), root).wait();
        else c.broadcast(x.t(), root);
        x.count_errors([&](int64_t i) { return val(t, 5 + root, root, i); }, async ? "broadcast async" : "broadcast");
      }
}

void check_send_recv(Backend& b, Communicator& c) {
  const int n = 4099, R = c.rank(), N = c.size();
  const int next = (R + 1) % N, prev = (R + N - 1) % N;
  for (DType t : {DType::f32, DType::bf16, DType::i32})
    for (bool async : {false, true}) {
      // Around the ring with separate send and recv: even ranks send first, odd ranks receive
      // first, so no cycle of senders waits on itself (blocking MPI and NCCL alike).
      if (N > 1) {
        Staged s(b, t, n), r(b, t, n);
        s.fill([&](int64_t i) { return val(t, 20, R, i); });
        r.fill([](int64_t) { return 0; });
        if (async) {
          CommHandle h1 = R % 2 == 0 ? c.send_async(s.t(), next) : c.recv_async(r.t(), prev);
          CommHandle h2 = R % 2 == 0 ? c.recv_async(r.t(), prev) : c.send_async(s.t(), next);
          h1.wait();
          h2.wait();
        } else if (R % 2 == 0) {
          c.send(s.t(), next);
          c.recv(r.t(), prev);
        } else {
          c.recv(r.t(), prev);
          c.send(s.t(), next);
        }
        r.count_errors([&](int64_t i) { return val(t, 20, prev, i); }, async ? "send/recv async" : "send/recv");
      }
      // The other way round, posted together.
      Staged s(b, t, n), r(b, t, n);
      s.fill([&](int64_t i) { return val(t, 21, R, i); });
      if (async) c.send_recv_async(s.t(), prev, r.t(), next).wait();
      else c.send_recv(s.t(), prev, r.t(), next);
      r.count_errors([&](int64_t i) { return val(t, 21, next, i); }, async ? "send_recv async" : "send_recv");
    }
}

void check_all_to_all(Backend& b, Communicator& c) {
  const int n = 129, R = c.rank(), N = c.size();
  for (DType t : {DType::f32, DType::bf16, DType::i64})
    for (bool async : {false, true}) {
      // Block j of rank R's input goes to rank j: element i of it is val(R, j * n + i).
      Staged in(b, t, int64_t(n) * N), out(b, t, int64_t(n) * N);
      in.fill([&](int64_t i) { return val(t, 30, R, i); });
      if (async) c.all_to_all_async(out.t(), in.t()).wait();
      else c.all_to_all(out.t(), in.t());
      out.count_errors([&](int64_t i) { return val(t, 30, int(i / n), int64_t(R) * n + i % n); },
                       async ? "all_to_all async" : "all_to_all");
    }
}

void check_all_to_allv(Backend& b, Communicator& c) {
  const int R = c.rank(), N = c.size();
  // Rank s sends count(s, d) elements to d (zero for some pairs); element i of that block is
  // val(s, d * 1000 + i).
  auto count = [](int s, int d) { return int64_t((s + 2 * d) % 4) * 37; };
  Communicator::AllToAllvPlan plan;
  int64_t send_total = 0, recv_total = 0;
  for (int j = 0; j < N; ++j) {
    plan.send_displs.push_back(send_total);
    plan.send_counts.push_back(count(R, j));
    send_total += count(R, j);
    plan.recv_displs.push_back(recv_total);
    plan.recv_counts.push_back(count(j, R));
    recv_total += count(j, R);
  }
  for (DType t : {DType::f32, DType::bf16, DType::i32})
    for (bool async : {false, true}) {
      Staged in(b, t, send_total), out(b, t, recv_total);
      in.fill([&](int64_t i) {
        int d = 0;
        while (i >= plan.send_displs[size_t(d)] + plan.send_counts[size_t(d)]) ++d;
        return val(t, 40, R, int64_t(d) * 1000 + i - plan.send_displs[size_t(d)]);
      });
      if (async) c.all_to_allv_async(out.t(), in.t(), plan).wait();
      else c.all_to_allv(out.t(), in.t(), plan);
      out.count_errors(
          [&](int64_t i) {
            int s = 0;
            while (i >= plan.recv_displs[size_t(s)] + plan.recv_counts[size_t(s)]) ++s;
            return val(t, 40, s, int64_t(R) * 1000 + i - plan.recv_displs[size_t(s)]);
          },
          async ? "all_to_allv async" : "all_to_allv");
    }
}

// A ring exchange in both directions at once, as one batch: each rank sends two tensors to its
// next rank and one to its previous rank and receives the counterparts, all posted together (every
// rank would block in a cycle with blocking sends, and on NCCL a send completes only with its
// receive). Two sends on the same pair in one batch arrive in the order posted. Large enough
// (4 MiB f32) for MPI's rendezvous protocol. Then two batches in flight at once, waited in
// reverse order, and an empty batch.
void check_batch_p2p(Backend& b, Communicator& c) {
  const int R = c.rank(), N = c.size();
  const int next = (R + 1) % N, prev = (R + N - 1) % N;
  for (DType t : {DType::f32, DType::bf16})
    for (int64_t n : {int64_t(4099), int64_t(1) << 20}) {
      for (bool async : {false, true}) {
        Staged to_next1(b, t, n), to_next2(b, t, n), to_prev(b, t, n);
        Staged from_prev1(b, t, n), from_prev2(b, t, n), from_next(b, t, n);
        to_next1.fill([&](int64_t i) { return val(t, 40, R, i); });
        to_next2.fill([&](int64_t i) { return val(t, 41, R, i); });
        to_prev.fill([&](int64_t i) { return val(t, 42, R, i); });
        for (Staged* s : {&from_prev1, &from_prev2, &from_next}) s->fill([](int64_t) { return 0; });
        // Each rank lists its ops in a different order (receives first on odd ranks).
        std::vector<P2POp> ops;
        auto sends = [&] {
          ops.push_back({P2POp::send, to_next1.t(), next});
          ops.push_back({P2POp::send, to_prev.t(), prev});
          ops.push_back({P2POp::send, to_next2.t(), next});
        };
        auto recvs = [&] {
          ops.push_back({P2POp::recv, from_next.t(), next});
          ops.push_back({P2POp::recv, from_prev1.t(), prev});
          ops.push_back({P2POp::recv, from_prev2.t(), prev});
        };
        if (R % 2) {
          recvs();
          sends();
        } else {
          sends();
          recvs();
        }
        if (async) c.batch_p2p_async(ops).wait();
        else c.batch_p2p(ops);
        const std::string what = std::string(async ? "batch_p2p async" : "batch_p2p") + " n=" + std::to_string(n);
        if (N <= 2) {
          // Every message comes from one rank (the other, or this one when alone), in its post
          // order next1 (40), prev (42), next2 (41); the receives here are posted in the order
          // from_next, from_prev1, from_prev2 on even and odd ranks alike.
          const int peer = next;
          from_next.count_errors([&](int64_t i) { return val(t, 40, peer, i); }, what + " 1st");
          from_prev1.count_errors([&](int64_t i) { return val(t, 42, peer, i); }, what + " 2nd");
          from_prev2.count_errors([&](int64_t i) { return val(t, 41, peer, i); }, what + " 3rd");
        } else if (N > 2) {
          from_prev1.count_errors([&](int64_t i) { return val(t, 40, prev, i); }, what + " from prev, 1st");
          from_prev2.count_errors([&](int64_t i) { return val(t, 41, prev, i); }, what + " from prev, 2nd");
          from_next.count_errors([&](int64_t i) { return val(t, 42, next, i); }, what + " from next");
        }
      }
      // Two batches in flight, waited in reverse order: forward ring, then backward ring.
      Staged a(b, t, n), ra(b, t, n), bb(b, t, n), rb(b, t, n);
      a.fill([&](int64_t i) { return val(t, 43, R, i); });
      bb.fill([&](int64_t i) { return val(t, 44, R, i); });
      const P2POp first[] = {{P2POp::send, a.t(), next}, {P2POp::recv, ra.t(), prev}};
      const P2POp second[] = {{P2POp::recv, rb.t(), next}, {P2POp::send, bb.t(), prev}};
      CommHandle h1 = c.batch_p2p_async(first);
      CommHandle h2 = c.batch_p2p_async(second);
      h2.wait();
      h1.wait();
      ra.count_errors([&](int64_t i) { return val(t, 43, prev, i); }, "batch_p2p two in flight, forward");
      rb.count_errors([&](int64_t i) { return val(t, 44, next, i); }, "batch_p2p two in flight, backward");
    }
  CommHandle none = c.batch_p2p_async({});
  EXPECT_FALSE(none.pending());
}

void check_all_operations(Backend& b, Communicator& c) {
  check_all_reduce(b, c);
  check_reduce_scatter(b, c);
  check_all_gather(b, c);
  check_broadcast(b, c);
  check_send_recv(b, c);
  check_batch_p2p(b, c);
  check_all_to_all(b, c);
  check_all_to_allv(b, c);
  c.barrier();
  c.barrier_async().wait();
}

// Every layout that fits the world: each group's all-reduce of (world rank + 1) must give the
// sum over exactly the members the pure functions name, and each group rank its coordinate.
void check_process_groups(Backend& b) {
  const int W = world_size(), me = world_rank();
  for (int t = 1; t <= W; ++t)
    for (int p = 1; t * p <= W; ++p) {
      if (W % (t * p) != 0) continue;
      for (int e = 1; e <= W / (t * p); ++e) {
        if ((W / (t * p)) % e != 0) continue;
        const Layout l = make_layout(W, t, p, e);
        SCOPED_TRACE("tensor " + std::to_string(t) + " pipeline " + std::to_string(p) + " expert " + std::to_string(e));
        ProcessGroups pg(MPI_COMM_WORLD, l, *b.rt);
        EXPECT_EQ(pg.coords(), coords_of(me, l));
        EXPECT_EQ(pg.pipeline_prev_rank(), pipeline_prev_rank(me, l));
        EXPECT_EQ(pg.pipeline_next_rank(), pipeline_next_rank(me, l));
        for (GroupKind k : {GroupKind::tensor, GroupKind::data, GroupKind::pipeline, GroupKind::embedding,
                            GroupKind::expert, GroupKind::expert_data}) {
          const int gi = group_index(k, me, l);
          ASSERT_EQ(gi >= 0, k != GroupKind::embedding || pg.in_embedding_group());
          if (gi < 0) continue;
          const std::vector<int> members = group_members(k, l)[size_t(gi)];
          Communicator& c = pg.group(k);
          ASSERT_EQ(c.size(), int(members.size())) << group_kind_name(k);
          ASSERT_EQ(members[size_t(c.rank())], me) << group_kind_name(k);
          Staged x(b, DType::i64, 3);
          x.fill([&](int64_t i) { return (me + 1) * (i + 1); });
          c.all_reduce(x.t());
          int64_t sum = 0;
          for (int m : members) sum += m + 1;
          x.count_errors([&](int64_t i) { return sum * (i + 1); }, group_kind_name(k));
        }
        // One activation down the pipeline: stage s receives (prev world rank) from stage s - 1.
        Staged out(b, DType::i32, 5), in(b, DType::i32, 5);
        out.fill([&](int64_t) { return me; });
        if (pg.pipeline_prev_peer() >= 0) pg.pipeline().recv(in.t(), pg.pipeline_prev_peer());
        if (pg.pipeline_next_peer() >= 0) pg.pipeline().send(out.t(), pg.pipeline_next_peer());
        if (pg.pipeline_prev_rank() >= 0)
          in.count_errors([&](int64_t) { return pg.pipeline_prev_rank(); }, "pipeline send/recv");
      }
    }
}

// ---- host (MPI) ----

TEST(MpiComm, AllOperationsOnWorld) {
  Backend b = make_backend(false);
  auto c = Communicator::create(MPI_COMM_WORLD, *b.rt, "world");
  EXPECT_EQ(c->rank(), world_rank());
  EXPECT_EQ(c->size(), world_size());
  EXPECT_FALSE(c->has_nccl());
  check_all_operations(b, *c);
}

TEST(MpiComm, AllOperationsOnHalves) {
  // Two groups (even and odd world ranks) working at the same time.
  Backend b = make_backend(false);
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() % 2, world_rank(), &half);
  auto c = Communicator::create(half, *b.rt, "half");
  MPI_Comm_free(&half);
  EXPECT_EQ(c->size(), (world_size() + 1 - world_rank() % 2) / 2);
  EXPECT_EQ(c->rank(), world_rank() / 2);
  check_all_operations(b, *c);
}

// Communicator::traffic counts what a rank sends as the ring algorithms move it, whatever the op.
TEST(MpiComm, TrafficCountsTheRingAlgorithmsBytes) {
  Backend b = make_backend(false);
  auto c = Communicator::create(MPI_COMM_WORLD, *b.rt, "world");
  const int n = c->size(), r = c->rank();
  std::vector<float> whole(size_t(n) * 1000), piece(1000);
  const Tensor w(whole.data(), DType::f32, Device::CPU(), {int64_t(n) * 1000});
  const Tensor p(piece.data(), DType::f32, Device::CPU(), {1000});
  uint64_t bytes = 0, ops = 0;
  auto expect = [&](uint64_t more, const char* what) {
    bytes += more;
    ops += more > 0;
    EXPECT_EQ(c->traffic().bytes, bytes) << what;
    EXPECT_EQ(c->traffic().ops, ops) << what;
  };
  const uint64_t W = uint64_t(n) * 4000;  // bytes of `whole`
  c->all_reduce(w);
  expect(2 * W * uint64_t(n - 1) / uint64_t(n), "all_reduce: 2 (n-1)/n of the tensor");
  c->reduce_scatter(p, w);
  expect(W * uint64_t(n - 1) / uint64_t(n), "reduce_scatter: (n-1)/n of the input");
  c->all_gather(w, p);
  expect(W * uint64_t(n - 1) / uint64_t(n), "all_gather: (n-1)/n of the output");
  c->broadcast(p, 0);
  expect(4000 * uint64_t(n - 1) / uint64_t(n), "broadcast: (n-1)/n of the tensor");
  std::vector<float> exchanged(whole.size()), received(1000);
  c->all_to_all(Tensor(exchanged.data(), DType::f32, Device::CPU(), {int64_t(n) * 1000}), w);
  expect(W * uint64_t(n - 1) / uint64_t(n), "all_to_all: the blocks for the other ranks");
  // A ring: each rank sends `piece` to the next and receives from the previous.
  const P2POp ring[] = {{P2POp::send, p, (r + 1) % n},
                        {P2POp::recv, Tensor(received.data(), DType::f32, Device::CPU(), {1000}), (r + n - 1) % n}};
  c->batch_p2p(ring);
  expect(4000, "batch_p2p: what it sends");
}

TEST(MpiProcessGroups, EveryLayoutOfTheWorld) {
  Backend b = make_backend(false);
  check_process_groups(b);
}

// ---- device (NCCL) ----

#define SKIP_WITHOUT_GPUS()                                        \
  do {                                                             \
    int local_ = 0;                                                \
    std::string why_;                                              \
    if (!gpus_for_every_local_rank(&local_, &why_)) GTEST_SKIP() << "needs a GPU per local rank: " << why_; \
  } while (0)

TEST(NcclComm, AllOperationsOnWorld) {
  SKIP_WITHOUT_GPUS();
  Backend b = make_backend(true);
  auto c = Communicator::create(MPI_COMM_WORLD, *b.rt, "world");
  EXPECT_TRUE(c->has_nccl());
  check_all_operations(b, *c);
}

TEST(NcclComm, HostTensorsOnACudaRuntimeUseMpi) {
  SKIP_WITHOUT_GPUS();
  Backend cuda = make_backend(true);
  auto c = Communicator::create(MPI_COMM_WORLD, *cuda.rt, "world");
  Backend host = make_backend(false);  // host tensors, same communicator
  check_all_reduce(host, *c);
}

TEST(NcclProcessGroups, EveryLayoutOfTheWorld) {
  SKIP_WITHOUT_GPUS();
  Backend b = make_backend(true);
  check_process_groups(b);
}

// Random values in [-1, 1) from (seed, rank, index), rounded to `t`, as raw bytes.
std::vector<unsigned char> random_values(DType t, int seed, int rank, int64_t n) {
  std::vector<unsigned char> out(size_t(n) * dtype_size(t));
  for (int64_t i = 0; i < n; ++i) {
    const float v = float(val(DType::i64, seed, rank, i * 7919 + 13) + 8) / 8.0f - 1.0f +
                    float(val(DType::i64, seed + 1, rank, i) + 8) / 1024.0f;
    if (t == DType::f32) std::memcpy(&out[size_t(i) * 4], &v, 4);
    if (t == DType::bf16) { bf16_t h = to_bf16(v); std::memcpy(&out[size_t(i) * 2], &h, 2); }
    if (t == DType::f16) { f16_t h = to_f16(v); std::memcpy(&out[size_t(i) * 2], &h, 2); }
  }
  return out;
}

// *_direct / *_shared: into a shared gather target (Communicator::share_gather_target).
enum class PairOp { all_reduce, all_reduce_shared, reduce_scatter, reduce_scatter_in_place, all_gather, all_gather_in_place, all_gather_direct,
                    all_gather_direct_in_place };

const char* pair_op_name(PairOp op) {
  switch (op) {
    case PairOp::all_reduce: return "all_reduce";
    case PairOp::all_reduce_shared: return "all_reduce (shared target)";
    case PairOp::reduce_scatter: return "reduce_scatter";
    case PairOp::reduce_scatter_in_place: return "reduce_scatter (in place)";
    case PairOp::all_gather: return "all_gather";
    case PairOp::all_gather_in_place: return "all_gather (in place)";
    case PairOp::all_gather_direct: return "all_gather (direct)";
    case PairOp::all_gather_direct_in_place: return "all_gather (direct, in place)";
  }
  return "?";
}

// `op` over `c` on a device copy of `in` (n elements of t; a gather's input is its first n / 2);
// returns the output's bytes.
std::vector<unsigned char> run_pair_op(Communicator& c, Runtime& rt, PairOp op, DType t, const std::vector<unsigned char>& in,
                                       int64_t n) {
  const size_t e = dtype_size(t), half = size_t(n / 2);
  const Tensor host_in(const_cast<unsigned char*>(in.data()), t, Device::CPU(), Shape{n});
  Buffer buf(rt.allocator(), size_t(n) * e, "pair op"), side(rt.allocator(), half * e, "pair op side");
  const Tensor x = buf.tensor(t, Shape{n}), mine = x.slice(int64_t(half) * c.rank(), Shape{int64_t(half)});
  const Tensor other = side.tensor(t, Shape{int64_t(half)});
  Tensor result = x;
  const bool direct = op == PairOp::all_gather_direct || op == PairOp::all_gather_direct_in_place ||
                      op == PairOp::all_reduce_shared;
  if (direct) c.share_gather_target(x);
  switch (op) {
    case PairOp::all_reduce:
    case PairOp::all_reduce_shared: copy(rt, x, host_in); c.all_reduce(x); break;
    case PairOp::reduce_scatter: copy(rt, x, host_in); c.reduce_scatter(other, x); result = other; break;
    case PairOp::reduce_scatter_in_place: copy(rt, x, host_in); c.reduce_scatter(mine, x); result = mine; break;
    case PairOp::all_gather:
    case PairOp::all_gather_direct: copy(rt, other, host_in.slice(0, Shape{int64_t(half)})); c.all_gather(x, other); break;
    case PairOp::all_gather_in_place:
    case PairOp::all_gather_direct_in_place:
      copy(rt, x, host_in);  // the peer's block holds stale values until the gather overwrites it
      copy(rt, mine, host_in.slice(0, Shape{int64_t(half)}));
      c.all_gather(x, mine);
      break;
  }
  std::vector<unsigned char> out(result.nbytes());
  copy(rt, Tensor(out.data(), t, Device::CPU(), result.shape), result);
  rt.synchronize();
  if (direct) c.drop_gather_target(x);
  return out;
}

// The two-rank peer path (core/cuda/peer_collectives.h) against NCCL on the same random inputs, for
// every op it takes: tensors of several copy chunks (each receive slot used more than once, a
// partial last chunk), two rounds, f32/bf16/f16; the results must be bitwise equal, and a gather
// must hold each rank's input. Ranks pair up (0-1, 2-3, ...).
TEST(PeerCollectives, BitwiseEqualToNccl) {
  SKIP_WITHOUT_GPUS();
  Backend peer = make_backend(true);
  Backend nccl = make_backend(true, false);
  MPI_Comm pair;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, world_rank() / 2, world_rank(), &pair), MPI_SUCCESS);
  auto cp = Communicator::create(pair, *peer.rt, "pair (peer)");
  auto cn = Communicator::create(pair, *nccl.rt, "pair (nccl)");
  MPI_Comm_free(&pair);
  if (cp->size() < 2) GTEST_SKIP() << "this rank has no partner (odd world size)";
  for (PairOp op : {PairOp::all_reduce, PairOp::all_reduce_shared, PairOp::reduce_scatter, PairOp::reduce_scatter_in_place, PairOp::all_gather,
                    PairOp::all_gather_in_place, PairOp::all_gather_direct, PairOp::all_gather_direct_in_place})
    for (DType t : {DType::f32, DType::bf16, DType::f16})
      for (int round = 0; round < 2; ++round) {
        // An odd count in a shared target (round 1) sums whole tensors through the slots instead of halves.
        const int64_t n = (int64_t(100) << 20) / int64_t(dtype_size(t)) + 6 + (op == PairOp::all_reduce_shared ? round : 0);
        const std::vector<unsigned char> in = random_values(t, 10 + round, cp->rank(), n);
        const std::vector<unsigned char> a = run_pair_op(*cp, *peer.rt, op, t, in, n);
        const std::vector<unsigned char> b = run_pair_op(*cn, *nccl.rt, op, t, in, n);
        if (!cp->peer_path_active()) GTEST_SKIP() << "the pair's GPUs have no peer access: NCCL only";
        EXPECT_FALSE(cn->peer_path_active());
        const std::string what = std::string(pair_op_name(op)) + " " + std::string(dtype_name(t)) + " round " +
                                 std::to_string(round);
        EXPECT_TRUE(a == b) << what << ": peer and NCCL results differ";
        if (op >= PairOp::all_gather) {
          const size_t block = size_t(n / 2) * dtype_size(t);
          for (int r = 0; r < 2; ++r) {
            const std::vector<unsigned char> want = random_values(t, 10 + round, r, n);
            EXPECT_TRUE(std::equal(want.begin(), want.begin() + std::ptrdiff_t(block), a.begin() + std::ptrdiff_t(r * block)))
                << what << ": block " << r << " is not rank " << r << "'s input";
          }
        } else {
          EXPECT_FALSE(std::equal(a.begin(), a.end(), in.begin())) << what << ": nothing was summed";
        }
      }
}

// All-reduce bus bandwidth (printed, not asserted) of 256 MiB of f32 (gradient buckets) and 32 MiB
// of bf16 (a tensor-parallel activation of GPT-2 1.3B at micro-batch 8): NCCL, and at two ranks of
// one node also the peer path.
void report_all_reduce_bandwidth(bool peer_all_reduce) {
  Backend b = make_backend(true, peer_all_reduce);
  Runtime& rt = *b.rt;
  auto c = Communicator::create(MPI_COMM_WORLD, rt, "world");
  for (DType t : {DType::f32, DType::bf16}) {
    const size_t bytes = t == DType::f32 ? size_t(256) << 20 : size_t(32) << 20;
    const int64_t n = int64_t(bytes / dtype_size(t));
    Buffer buf(rt.allocator(), bytes, "bandwidth test");
    Tensor x = buf.tensor(t, Shape{n});
    auto last = [&] {  // x's last element (f32 or bf16), after everything queued
      float f = 0;
      bf16_t h{};
      copy(rt, Tensor(t == DType::f32 ? static_cast<void*>(&f) : &h, t, Device::CPU(), Shape{1}), x.slice(n - 1, Shape{1}));
      rt.synchronize();
      return t == DType::f32 ? f : to_float(h);
    };
    fill(rt, x, 1.0f);
    c->all_reduce(x);
    EXPECT_EQ(last(), float(c->size()));
    if (peer_all_reduce && !c->peer_path_active()) {
      if (world_rank() == 0) std::printf("[ PEER     ] not available on these ranks (not two GPUs with peer access)\n");
      return;
    }
    for (int i = 0; i < 4; ++i) c->all_reduce(x);  // warm-up
    const int iters = 20;
    rt.synchronize();
    c->barrier();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) c->all_reduce(x);  // each orders the compute stream after it
    rt.synchronize();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    // 25 sums of the ones at two ranks: 2^25, exact in f32 and bf16 (every back-to-back one checked).
    const float after = last();
    if (c->size() == 2) {
      EXPECT_EQ(after, float(1 << 25));
    }
    double worst = 0;
    MPI_Allreduce(&s, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const double algbw = double(bytes) / worst / 1e9;
    const double busbw = algbw * 2.0 * (c->size() - 1) / c->size();
    if (world_rank() == 0)
      std::printf("[ %s ] all_reduce %s %zu MiB on %d ranks (%s): %.1f us, algbw %.1f GB/s, busbw %.1f GB/s\n",
                  peer_all_reduce ? "PEER    " : "NCCL    ", std::string(dtype_name(t)).c_str(), bytes >> 20, c->size(),
                  rt.device_name().c_str(), worst * 1e6, algbw, busbw);
  }
}

TEST(NcclBandwidth, AllReduce256MiB) {
  SKIP_WITHOUT_GPUS();
  report_all_reduce_bandwidth(false);
  report_all_reduce_bandwidth(true);
}

}  // namespace
}  // namespace trellis
