// Causal self-attention through cuDNN's fused flash attention (the frontend's SDPA graphs), for
// bf16/f16 without attention dropout outside deterministic mode: on Hopper it runs forward and
// backward several times faster than the mma.sync kernels of flash_attention.cu. Q, K and V are
// strided views into qkv (B, T, (H + 2 Hkv) hd), the output and its gradient are (B, T, C), so nothing
// is permuted; with fewer key-value heads than query heads cuDNN's SDPA runs grouped-query attention
// (query head h on key-value head h / (H / Hkv), its dK and dV summed over the group). The saved statistics are the natural-log log-sum-exp of the scaled scores per (b, h, t),
// the same quantity the own kernels keep, so either backward can follow either forward. Each problem
// builds its forward and backward graphs once; one that cuDNN does not support is remembered and
// takes the own kernels, forward and backward alike.
#include "core/cuda/cudnn_attention.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include <cudnn_frontend.h>

#include "core/cuda/cuda_state.h"

namespace trellis {

namespace fe = cudnn_frontend;

namespace {

// Tensor ids of the variant packs; a call's pointers are an array indexed by them.
enum : int64_t { kQ = 1, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV, kIds };
using Pointers = std::array<void*, kIds>;

struct Problem {
  int64_t B, H, Hkv, T, hd;
  DType t;
  int64_t window;  // sliding window, 0: none
  bool operator<(const Problem& o) const {
    return std::tie(B, H, Hkv, T, hd, t, window) < std::tie(o.B, o.H, o.Hkv, o.T, o.hd, o.t, o.window);
  }
  int64_t row() const { return (H + 2 * Hkv) * hd; }  // of qkv
};

// A built graph, its workspace and its tensor ids in the order execute() takes their pointers.
struct Built {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
  std::vector<int64_t> ids;
};

struct Graphs {
  bool supported = false;
  Built forward, backward;
};

void check(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) TRELLIS_FATAL(std::string("cuDNN ") + what + ": " + cudnnGetErrorString(s));
}

bool enabled_by_environment() {
  static const bool on = [] {
    const char* v = std::getenv("TRELLIS_CUDNN_ATTENTION");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

fe::DataType_t fe_type(DType t) { return t == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF; }

std::shared_ptr<fe::graph::Graph> new_graph(DType t) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe_type(t)).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(
      fe::DataType_t::FLOAT);
  return g;
}

// (B, heads, T, hd) views: into qkv rows for q, k, v (H, Hkv, Hkv heads), into (B, T, C) for the
// output and its gradient.
std::shared_ptr<fe::graph::Tensor_attributes> head_view(fe::graph::Graph& g, const char* name, int64_t uid,
                                                        const Problem& p, int64_t heads, int64_t row) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({p.B, heads, p.T, p.hd})
                      .set_stride({p.T * row, p.hd, row, 1}));
}

std::shared_ptr<fe::graph::Tensor_attributes> stats_view(fe::graph::Graph& g, const Problem& p) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name("stats")
                      .set_uid(kStats)
                      .set_dim({p.B, p.H, p.T, 1})
                      .set_stride({p.H * p.T, p.T, 1, 1})
                      .set_data_type(fe::DataType_t::FLOAT));
}

// Builds a graph's plans into `out`; false (with nothing thrown) when cuDNN cannot run it.
bool finish(std::shared_ptr<fe::graph::Graph> g, cudnnHandle_t h, Built& out) {
  if (g->validate().is_bad() || g->build_operation_graph(h).is_bad() ||
      g->create_execution_plans({fe::HeurMode_t::A}).is_bad() || g->check_support(h).is_bad() ||
      g->build_plans(h).is_bad() || g->get_workspace_size(out.workspace).is_bad())
    return false;
  out.ids = g->get_variant_pack_uids_sorted();
  for (int64_t id : out.ids) TRELLIS_CHECK(id > 0 && id < kIds, "cuDNN attention: unexpected tensor id");
  out.graph = std::move(g);
  return true;
}

Graphs build(cudnnHandle_t h, const Problem& p) {
  Graphs out;
  const int64_t C = p.H * p.hd, W = p.row();
  const float scale = float(1.0 / std::sqrt(double(p.hd)));
  {
    auto g = new_graph(p.t);
    auto q = head_view(*g, "q", kQ, p, p.H, W), k = head_view(*g, "k", kK, p, p.Hkv, W),
         v = head_view(*g, "v", kV, p, p.Hkv, W);
    auto opt = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(true).set_causal_mask(true)
                   .set_attn_scale(scale);
    if (p.window > 0 && p.window < p.T) opt.set_diagonal_band_left_bound(int(p.window));  // keys (i - window, i]
    auto [o, stats] = g->sdpa(q, k, v, opt);
    o->set_output(true).set_uid(kO).set_dim({p.B, p.H, p.T, p.hd}).set_stride({p.T * C, p.hd, C, 1});
    stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim({p.B, p.H, p.T, 1})
        .set_stride({p.H * p.T, p.T, 1, 1});
    if (!finish(g, h, out.forward)) return out;
  }
  {
    auto g = new_graph(p.t);
    auto q = head_view(*g, "q", kQ, p, p.H, W), k = head_view(*g, "k", kK, p, p.Hkv, W),
         v = head_view(*g, "v", kV, p, p.Hkv, W);
    auto o = head_view(*g, "o", kO, p, p.H, C), d_o = head_view(*g, "dO", kdO, p, p.H, C);
    auto stats = stats_view(*g, p);
    auto opt = fe::graph::SDPA_backward_attributes().set_name("attention_backward").set_causal_mask(true)
                   .set_attn_scale(scale);
    if (p.window > 0 && p.window < p.T) opt.set_diagonal_band_left_bound(int(p.window));
    auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, d_o, stats, opt);
    for (auto [t, uid, heads] : {std::tuple{dq, kdQ, p.H}, std::tuple{dk, kdK, p.Hkv}, std::tuple{dv, kdV, p.Hkv}})
      t->set_output(true).set_uid(uid).set_dim({p.B, heads, p.T, p.hd}).set_stride({p.T * W, p.hd, W, 1});
    if (!finish(g, h, out.backward)) return out;
  }
  out.supported = true;
  return out;
}

}  // namespace

struct CudnnAttention {
  cudnnHandle_t handle = nullptr;
  std::map<Problem, Graphs> graphs;
};

namespace gpu {

void destroy_cudnn_attention(CudnnAttention* c) {
  if (!c) return;
  c->graphs.clear();
  if (c->handle) cudnnDestroy(c->handle);
  delete c;
}

namespace {

// The problem's graphs, built on first use; unsupported ones (no handle: cuDNN could not start on
// this machine, e.g. a runtime library older than the build's) take the own kernels.
const Graphs* graphs_for(CudaState& st, const Problem& p) {
  if (!st.cudnn) {
    auto* c = new CudnnAttention();
    const cudnnStatus_t s = cudnnCreate(&c->handle);
    if (s != CUDNN_STATUS_SUCCESS) {
      std::fprintf(stderr, "trellis: cuDNN is unavailable (%s); attention uses Trellis's own kernels\n",
                   cudnnGetErrorString(s));
      c->handle = nullptr;
    } else {
      check(cudnnSetStream(c->handle, st.compute), "cudnnSetStream");
    }
    st.cudnn = c;
  }
  auto it = st.cudnn->graphs.find(p);
  if (it == st.cudnn->graphs.end())
    it = st.cudnn->graphs.emplace(p, st.cudnn->handle ? build(st.cudnn->handle, p) : Graphs{}).first;
  return &it->second;
}

void run(Runtime& rt, CudaState& st, const Built& b, const Pointers& by_id) {
  void* ws = b.workspace > 0 ? rt.scratch(size_t(b.workspace)) : nullptr;
  Pointers ordered{};
  for (size_t i = 0; i < b.ids.size(); ++i) ordered[i] = by_id[size_t(b.ids[i])];
  auto status = b.graph->execute(st.cudnn->handle, ordered.data(), int(b.ids.size()), ws);
  if (status.is_bad()) TRELLIS_FATAL("cuDNN attention: " + status.get_message());
}

}  // namespace

bool cudnn_attention(Runtime& rt, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd, DType t, bool dropout,
                     int64_t window) {
  CudaState& st = cuda_state(rt);
  if (st.deterministic || dropout || !enabled_by_environment()) return false;
  if ((t != DType::bf16 && t != DType::f16) || (hd != 64 && hd != 128) || st.cc_major < 8) return false;
  if (window > INT32_MAX) return false;
  return graphs_for(st, Problem{B, H, Hkv, T, hd, t, window})->supported;
}

void cudnn_attention_forward(Runtime& rt, void* out, float* lse, const void* qkv, int64_t B, int64_t T, int64_t H,
                             int64_t Hkv, int64_t hd, DType t, int64_t window) {
  CudaState& st = cuda_state(rt);
  const Graphs& g = *graphs_for(st, Problem{B, H, Hkv, T, hd, t, window});
  const int64_t C = H * hd, Ckv = Hkv * hd, es = int64_t(dtype_size(t));
  char* base = static_cast<char*>(const_cast<void*>(qkv));
  Pointers p{};
  p[kQ] = base;
  p[kK] = base + C * es;
  p[kV] = base + (C + Ckv) * es;
  p[kO] = out;
  p[kStats] = lse;
  run(rt, st, g.forward, p);
}

void cudnn_attention_backward(Runtime& rt, void* dqkv, const void* dout, const void* qkv, const void* out,
                              const float* lse, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd, DType t,
                              int64_t window) {
  CudaState& st = cuda_state(rt);
  const Graphs& g = *graphs_for(st, Problem{B, H, Hkv, T, hd, t, window});
  const int64_t C = H * hd, Ckv = Hkv * hd, es = int64_t(dtype_size(t));
  char* in = static_cast<char*>(const_cast<void*>(qkv));
  char* grad = static_cast<char*>(dqkv);
  Pointers p{};
  p[kQ] = in;
  p[kK] = in + C * es;
  p[kV] = in + (C + Ckv) * es;
  p[kO] = const_cast<void*>(out);
  p[kdO] = const_cast<void*>(dout);
  p[kStats] = const_cast<float*>(lse);
  p[kdQ] = grad;
  p[kdK] = grad + C * es;
  p[kdV] = grad + (C + Ckv) * es;
  run(rt, st, g.backward, p);
}

}  // namespace gpu
}  // namespace trellis
