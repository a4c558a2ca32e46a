// Probe (issue 8): does cuDNN offer a faster SDPA plan than the heuristic's first pick at GPT-2's
// shapes? Builds the graphs Trellis builds (core/cuda/cudnn_attention.cpp: causal, q/k/v strided
// views of one (B, T, 3C) tensor, output and gradients likewise strided), then times
//   1. every plan that heuristics A, B and FALLBACK list (build policy ALL), and
//   2. every knob combination of each engine those plans use (create_execution_plan),
// as medians of 5 rounds of 20 back-to-back runs. Prints one line per plan.
// Build: g++ -O2 -std=c++20 -I third_party/cudnn-frontend/include -I /usr/local/cuda/include \
//        attn_plans_probe.cpp -L /usr/local/cuda/lib64 -lcudnn -lcudart -ldl
#include <cuda_runtime.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace fe = cudnn_frontend;

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

struct Shape {
  const char* name;
  int64_t B, H, T, hd;
};

enum : int64_t { kQ = 1, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV, kIds };

std::shared_ptr<fe::graph::Tensor_attributes> view(fe::graph::Graph& g, const char* n, int64_t uid, const Shape& s,
                                                   int64_t row) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(n).set_uid(uid).set_dim({s.B, s.H, s.T, s.hd}).set_stride(
      {s.T * row, s.hd, row, 1}));
}

std::shared_ptr<fe::graph::Graph> make(const Shape& s, bool backward) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const int64_t C = s.H * s.hd;
  const float scale = float(1.0 / std::sqrt(double(s.hd)));
  auto q = view(*g, "q", kQ, s, 3 * C), k = view(*g, "k", kK, s, 3 * C), v = view(*g, "v", kV, s, 3 * C);
  if (!backward) {
    auto opt = fe::graph::SDPA_attributes().set_name("a").set_generate_stats(true).set_causal_mask(true).set_attn_scale(
        scale);
    auto [o, st] = g->sdpa(q, k, v, opt);
    o->set_output(true).set_uid(kO).set_dim({s.B, s.H, s.T, s.hd}).set_stride({s.T * C, s.hd, C, 1});
    st->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim({s.B, s.H, s.T, 1}).set_stride(
        {s.H * s.T, s.T, 1, 1});
  } else {
    auto o = view(*g, "o", kO, s, C), d_o = view(*g, "dO", kdO, s, C);
    auto st = g->tensor(fe::graph::Tensor_attributes().set_name("stats").set_uid(kStats).set_dim({s.B, s.H, s.T, 1})
                            .set_stride({s.H * s.T, s.T, 1, 1}).set_data_type(fe::DataType_t::FLOAT));
    auto opt = fe::graph::SDPA_backward_attributes().set_name("b").set_causal_mask(true).set_attn_scale(scale);
    auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, d_o, st, opt);
    for (auto [t, uid] : {std::pair{dq, kdQ}, std::pair{dk, kdK}, std::pair{dv, kdV}})
      t->set_output(true).set_uid(uid).set_dim({s.B, s.H, s.T, s.hd}).set_stride({s.T * 3 * C, s.hd, 3 * C, 1});
  }
  return g;
}

struct Buffers {
  void* p[kIds] = {};
};

Buffers alloc(const Shape& s) {
  Buffers b;
  const size_t C = size_t(s.H * s.hd), rows = size_t(s.B * s.T);
  // Random-ish bf16 values in [-1, 1): a fixed pattern, written once.
  auto fill = [](void* dst, size_t n) {
    std::vector<uint16_t> h(n);
    uint32_t x = 12345;
    for (auto& e : h) {
      x = x * 1664525u + 1013904223u;
      const float f = (float((x >> 8) & 0xffff) / 32768.0f - 1.0f) * 0.5f;
      uint32_t u;
      std::memcpy(&u, &f, 4);
      e = uint16_t(u >> 16);
    }
    CK(cudaMemcpy(dst, h.data(), n * 2, cudaMemcpyHostToDevice));
  };
  void *qkv, *o, *dout, *dqkv, *stats;
  CK(cudaMalloc(&qkv, rows * 3 * C * 2));
  CK(cudaMalloc(&o, rows * C * 2));
  CK(cudaMalloc(&dout, rows * C * 2));
  CK(cudaMalloc(&dqkv, rows * 3 * C * 2));
  CK(cudaMalloc(&stats, size_t(s.B * s.H * s.T) * 4));
  fill(qkv, rows * 3 * C);
  fill(dout, rows * C);
  char* base = static_cast<char*>(qkv);
  char* grad = static_cast<char*>(dqkv);
  b.p[kQ] = base;
  b.p[kK] = base + C * 2;
  b.p[kV] = base + 2 * C * 2;
  b.p[kO] = o;
  b.p[kStats] = stats;
  b.p[kdO] = dout;
  b.p[kdQ] = grad;
  b.p[kdK] = grad + C * 2;
  b.p[kdV] = grad + 2 * C * 2;
  return b;
}

void* workspace(int64_t bytes) {
  static void* ws = nullptr;
  static int64_t have = 0;
  if (bytes > have) {
    if (ws) CK(cudaFree(ws));
    CK(cudaMalloc(&ws, size_t(bytes)));
    have = bytes;
  }
  return ws;
}

// Median ms of 5 rounds of 20 runs of plan i; -1 when it fails.
double time_plan(fe::graph::Graph& g, cudnnHandle_t h, const Buffers& b, int64_t i) {
  int64_t wsb = 0;
  if (g.get_workspace_size_plan_at_index(i, wsb).is_bad()) return -1;
  void* ws = workspace(std::max<int64_t>(wsb, 1));
  std::vector<int64_t> ids = g.get_variant_pack_uids_sorted();
  std::vector<void*> ptrs;
  for (int64_t id : ids) ptrs.push_back(b.p[id]);
  auto run = [&] { return g.execute_plan_at_index(h, ptrs.data(), int(ptrs.size()), ws, i).is_good(); };
  for (int w = 0; w < 3; ++w)
    if (!run()) return -1;
  cudaEvent_t a, z;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&z));
  std::vector<double> rounds;
  for (int r = 0; r < 5; ++r) {
    CK(cudaEventRecord(a));
    for (int k = 0; k < 20; ++k) run();
    CK(cudaEventRecord(z));
    CK(cudaEventSynchronize(z));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, z));
    rounds.push_back(ms / 20);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(z));
  std::sort(rounds.begin(), rounds.end());
  return rounds[2];
}

std::string knob_text(const std::unordered_map<fe::KnobType_t, int64_t>& k) {
  std::map<int64_t, int64_t> sorted;
  for (auto [t, v] : k) sorted[int64_t(t)] = v;
  std::string s;
  for (auto [t, v] : sorted) s += std::to_string(t) + "=" + std::to_string(v) + " ";
  return s;
}

void probe(const Shape& s, bool backward, cudnnHandle_t h, const Buffers& b) {
  const char* dir = backward ? "bwd" : "fwd";
  auto g = make(s, backward);
  if (g->validate().is_bad() || g->build_operation_graph(h).is_bad()) {
    std::printf("%s %s: graph not supported\n", s.name, dir);
    return;
  }
  // 1. What the heuristics list.
  for (auto st : {g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::B, fe::HeurMode_t::FALLBACK}),
                  g->check_support(h), g->build_plans(fe::BuildPlanPolicy_t::ALL)})
    if (st.is_bad()) std::printf("  (%s)\n", st.get_message().c_str());
  const int64_t n = g->get_execution_plan_count();
  std::printf("%s %s: %lld heuristic plans\n", s.name, dir, (long long)n);
  std::set<int64_t> engines;
  for (int64_t i = 0; i < n; ++i) {
    std::string name;
    g->get_plan_name_at_index(i, name);
    int64_t eng = -1, wsb = 0;
    std::unordered_map<fe::KnobType_t, int64_t> knobs;
    g->get_engine_and_knobs_at_index(i, eng, knobs);
    g->get_workspace_size_plan_at_index(i, wsb);
    if (eng >= 0) engines.insert(eng);
    std::printf("  plan %lld %-40s engine %lld knobs [%s] ws %lld: %.4f ms\n", (long long)i, name.c_str(),
                (long long)eng, knob_text(knobs).c_str(), (long long)wsb, time_plan(*g, h, b, i));
  }
  // 2. Every knob combination of those engines.
  for (int64_t eng : engines) {
    std::vector<fe::Knob> knobs;
    auto probe_graph = make(s, backward);
    if (probe_graph->validate().is_bad() || probe_graph->build_operation_graph(h).is_bad() ||
        probe_graph->get_knobs_for_engine(eng, knobs).is_bad()) continue;
    std::vector<std::vector<std::pair<fe::KnobType_t, int64_t>>> combos{{}};
    for (const auto& k : knobs) {
      std::printf("  engine %lld knob %lld: %lld..%lld step %lld\n", (long long)eng, (long long)k.type,
                  (long long)k.minValue, (long long)k.maxValue, (long long)k.stride);
      std::vector<std::vector<std::pair<fe::KnobType_t, int64_t>>> next;
      const int64_t step = k.stride > 0 ? k.stride : 1;
      for (auto& c : combos)
        for (int64_t v = k.minValue; v <= k.maxValue; v += step) {
          auto d = c;
          d.push_back({k.type, v});
          next.push_back(d);
        }
      combos = std::move(next);
      if (combos.size() > 256) break;
    }
    if (combos.size() > 256) {
      std::printf("  engine %lld: %zu combinations, too many, skipped\n", (long long)eng, combos.size());
      continue;
    }
    for (auto& c : combos) {
      std::unordered_map<fe::KnobType_t, int64_t> km(c.begin(), c.end());
      auto kg = make(s, backward);
      if (kg->validate().is_bad() || kg->build_operation_graph(h).is_bad()) continue;
      if (kg->create_execution_plan(eng, km).is_bad() || kg->check_support(h).is_bad() ||
          kg->build_plans(fe::BuildPlanPolicy_t::ALL).is_bad() || kg->get_execution_plan_count() < 1)
        continue;
      int64_t wsb = 0;
      kg->get_workspace_size_plan_at_index(0, wsb);
      std::printf("  engine %lld knobs [%s] ws %lld: %.4f ms\n", (long long)eng, knob_text(km).c_str(),
                  (long long)wsb, time_plan(*kg, h, b, 0));
    }
  }
  std::fflush(stdout);
}

int main() {
  cudnnHandle_t h;
  if (cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) return 1;
  std::printf("cuDNN %zu\n", cudnnGetVersion());
  const Shape shapes[] = {{"1.3B B16 H16 hd128", 16, 16, 1024, 128},
                          {"350M B16 H16 hd64", 16, 16, 1024, 64},
                          {"124M B32 H12 hd64", 32, 12, 1024, 64}};
  for (const auto& s : shapes) {
    Buffers b = alloc(s);
    probe(s, false, h, b);  // forward first: the backward reads its output and statistics
    probe(s, true, h, b);
  }
  cudnnDestroy(h);
  return 0;
}
