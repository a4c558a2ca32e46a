// Gathering stage tensors (and their tensor-parallel shards) into the whole-model layout and back,
// parameter by parameter by name.
#include "launcher/whole_model.h"

#include <cstring>
#include <map>

#include "core/error.h"
#include "core/ops.h"

namespace trellis {

namespace {

// name -> (offset, numel) in a flat buffer holding `specs` in order (as ParameterStore lays out).
std::map<std::string, std::pair<int64_t, int64_t>> offsets(const std::vector<ParameterSpec>& specs) {
  std::map<std::string, std::pair<int64_t, int64_t>> out;
  int64_t at = 0;
  for (const ParameterSpec& s : specs) {
    out[s.name] = {at, s.shape.numel()};
    at += s.shape.numel();
  }
  return out;
}

int64_t numel_of(const std::vector<ParameterSpec>& specs) {
  int64_t n = 0;
  for (const ParameterSpec& s : specs) n += s.shape.numel();
  return n;
}

std::vector<char> to_host(Runtime& rt, const Tensor& t) {
  std::vector<char> host(t.nbytes());
  copy(rt, Tensor(host.data(), t.dtype, Device::CPU(), t.shape), t);
  rt.synchronize();
  return host;
}

// Calls f(local index, global index, n) for runs of n elements of the shard `s` that are
// contiguous in the whole tensor too: a group's piece of the split dimension times what lies inside it.
template <class F>
void for_each_run(const ParameterSpec& s, F f) {
  const int64_t numel = s.shape.numel();
  if (s.split.replicated()) {
    f(int64_t(0), int64_t(0), numel);
    return;
  }
  const int64_t n = s.shape[s.split.dim];
  int64_t inner = 1;
  for (int d = s.split.dim + 1; d < s.shape.rank; ++d) inner *= s.shape[d];
  for (int64_t outer = 0; outer < numel; outer += n * inner)
    for (int g = 0; g < s.split.groups; ++g) {
      const auto [b, e] = s.split.group_range(n, g);
      const int64_t i = outer + b * inner;
      f(i, s.split.global_index(s.shape, i), (e - b) * inner);
    }
}

// Tensor rank 0 gets the whole tensors of pipeline rank `pr`'s stage from every tensor rank's
// shards `mine` (replicated ones from its own); the others send theirs and get nothing.
std::vector<char> gather_stage(Communicator* tensor, const WholeModelLayout& layout, int pr, std::vector<char> mine,
                               DType dtype) {
  const int t = layout.tensor(), tr = tensor ? tensor->rank() : 0;
  if (t == 1) return mine;
  if (tr != 0) {
    tensor->send(Tensor(mine.data(), dtype, Device::CPU(), {layout.shard_numel(pr, tr)}), 0);
    return {};
  }
  const size_t e = dtype_size(dtype);
  const auto whole = offsets(layout.stage[size_t(pr)]);
  std::vector<char> out(size_t(layout.stage_numel(pr)) * e);
  for (int j = 0; j < t; ++j) {
    std::vector<char> theirs;
    if (j > 0) {
      theirs.resize(size_t(layout.shard_numel(pr, j)) * e);
      tensor->recv(Tensor(theirs.data(), dtype, Device::CPU(), {layout.shard_numel(pr, j)}), j);
    }
    const char* src = j == 0 ? mine.data() : theirs.data();
    for (const ParameterSpec& s : layout.shard_of(pr, j)) {
      char* dst = out.data() + size_t(whole.at(s.name).first) * e;
      if (j == 0 || !s.split.replicated() || s.expert)
        for_each_run(s, [&](int64_t i, int64_t g, int64_t n) {
          std::memcpy(dst + size_t(g) * e, src + size_t(i) * e, size_t(n) * e);
        });
      src += size_t(s.shape.numel()) * e;
    }
  }
  return out;
}

}  // namespace

WholeModelLayout::WholeModelLayout(const GPTConfig& cfg, int p, int v, int t) {
  GPTConfig all = cfg;  // the whole model and the stages hold every expert
  all.moe.expert_parallel = 1;
  whole = GPT::parameter_specs(all);
  const int experts = int(cfg.moe.expert_parallel);
  expert_parts = experts > 1;
  for (int r = 0; r < p; ++r) {
    const GPTPart part = GPTPart::of_rank(cfg, p, v, r);
    stage.push_back(GPT::parameter_specs(all, part));
    for (int j = 0; j < t; ++j) {
      if (experts > 1) {
        for (int g = 0; g < experts; ++g)
          shard.push_back(GPT::parameter_specs(cfg, part, TensorParallelContext{nullptr, t, j}, g));
        continue;
      }
      shard.push_back(GPT::parameter_specs(cfg, part, TensorParallelContext{nullptr, t, j}));
    }
  }
}

int64_t WholeModelLayout::whole_numel() const { return numel_of(whole); }
int64_t WholeModelLayout::stage_numel(int rank) const { return numel_of(stage.at(size_t(rank))); }
int64_t WholeModelLayout::shard_numel(int pipeline_rank, int tensor_rank) const {
  return numel_of(shard_of(pipeline_rank, tensor_rank));
}
const std::vector<ParameterSpec>& WholeModelLayout::shard_of(int pipeline_rank, int tensor_rank) const {
  return shard.at(size_t(pipeline_rank * tensor() + tensor_rank));
}

std::vector<char> gather_whole(Runtime& rt, Communicator* tensor, Communicator* pipeline, const WholeModelLayout& layout,
                               const Tensor& t) {
  const int rank = pipeline ? pipeline->rank() : 0, p = layout.pipeline();
  TRELLIS_CHECK(t.numel() == layout.shard_numel(rank, tensor ? tensor->rank() : 0),
                "gather_whole: tensor does not match this rank's part");
  std::vector<char> mine = gather_stage(tensor, layout, rank, to_host(rt, t), t.dtype);
  if (tensor && tensor->rank() != 0) return {};
  if (p == 1) return mine;
  if (rank != 0) {
    pipeline->send(Tensor(mine.data(), t.dtype, Device::CPU(), {layout.stage_numel(rank)}), 0);
    return {};
  }
  const size_t e = dtype_size(t.dtype);
  const auto whole = offsets(layout.whole);
  std::vector<char> out(size_t(layout.whole_numel()) * e);
  std::vector<bool> filled(layout.whole.size(), false);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < layout.whole.size(); ++i) index[layout.whole[i].name] = i;
  for (int r = 0; r < p; ++r) {
    std::vector<char> theirs;
    if (r > 0) {
      theirs.resize(size_t(layout.stage_numel(r)) * e);
      pipeline->recv(Tensor(theirs.data(), t.dtype, Device::CPU(), {layout.stage_numel(r)}), r);
    }
    const std::vector<char>& src = r == 0 ? mine : theirs;
    for (const auto& [name, at] : offsets(layout.stage[size_t(r)])) {
      const size_t i = index.at(name);
      if (filled[i]) continue;  // the head's copy of the token embedding
      filled[i] = true;
      std::memcpy(out.data() + size_t(whole.at(name).first) * e, src.data() + size_t(at.first) * e, size_t(at.second) * e);
    }
  }
  for (size_t i = 0; i < filled.size(); ++i)
    TRELLIS_CHECK(filled[i], "gather_whole: no stage holds " + layout.whole[i].name);
  return out;
}

void scatter_whole(Runtime& rt, const WholeModelLayout& layout, int pipeline_rank, int tensor_rank,
                   const std::vector<char>& whole, const Tensor& t) {
  const size_t e = dtype_size(t.dtype);
  TRELLIS_CHECK(whole.size() == size_t(layout.whole_numel()) * e, "scatter_whole: whole-model copy has the wrong size");
  const auto from = offsets(layout.whole);
  scatter_tensors(rt, layout, pipeline_rank, tensor_rank,
                  [&](const std::string& name) { return whole.data() + size_t(from.at(name).first) * e; }, t);
}

void scatter_tensors(Runtime& rt, const WholeModelLayout& layout, int pipeline_rank, int tensor_rank,
                     const std::function<const char*(const std::string& name)>& tensor, const Tensor& t) {
  TRELLIS_CHECK(t.numel() == layout.shard_numel(pipeline_rank, tensor_rank),
                "scatter_tensors: tensor does not match this rank's part");
  const size_t e = dtype_size(t.dtype);
  std::vector<char> mine(t.nbytes());
  char* dst = mine.data();
  for (const ParameterSpec& s : layout.shard_of(pipeline_rank, tensor_rank)) {
    const char* src = tensor(s.name);
    for_each_run(s, [&](int64_t i, int64_t g, int64_t n) {
      std::memcpy(dst + size_t(i) * e, src + size_t(g) * e, size_t(n) * e);
    });
    dst += size_t(s.shape.numel()) * e;
  }
  copy(rt, t, Tensor(mine.data(), t.dtype, Device::CPU(), t.shape));
  rt.synchronize();
}

void stream_whole_tensors(const CheckpointReader& reader, const std::string& name, const std::vector<ParameterSpec>& whole,
                          size_t e, const std::function<bool(const std::string& tensor)>& wanted,
                          const std::function<void(const std::string& tensor, uint64_t at, const char* bytes, size_t n)>& f) {
  struct Range {
    uint64_t begin, end;
    const std::string* tensor;
  };
  std::vector<Range> ranges;  // the wanted tensors' bytes in the blob, in order
  uint64_t at = 0;
  for (const ParameterSpec& p : whole) {
    const uint64_t bytes = uint64_t(p.shape.numel()) * e;
    if (wanted(p.name)) ranges.push_back({at, at + bytes, &p.name});
    at += bytes;
  }
  std::vector<std::pair<uint64_t, uint64_t>> bytes;
  for (const Range& r : ranges) bytes.emplace_back(r.begin, r.end);
  size_t first = 0;  // the ranges wholly before the piece are done
  // Each piece lies within one range: the reader hands out the ranges' parts.
  reader.read_blob_ranges(name, bytes, [&](uint64_t offset, const char* data, size_t n) {
    while (ranges[first].end <= offset) ++first;
    f(*ranges[first].tensor, offset - ranges[first].begin, data, n);
  });
}

void place_shard(const WholeModelLayout& layout, int pipeline_rank, int tensor_rank, const char* shard,
                 std::vector<char>& whole, size_t elem_size) {
  const size_t e = elem_size;
  TRELLIS_CHECK(whole.size() == size_t(layout.whole_numel()) * e, "place_shard: whole-model copy has the wrong size");
  const auto to = offsets(layout.whole);
  auto held_before = [&](const std::string& name) {
    for (int r = 0; r < pipeline_rank; ++r)
      for (const ParameterSpec& s : layout.stage[size_t(r)])
        if (s.name == name) return true;
    return false;
  };
  for (const ParameterSpec& s : layout.shard_of(pipeline_rank, tensor_rank)) {
    if (!held_before(s.name) &&
        (tensor_rank == 0 || !s.split.replicated() || s.expert)) {
      char* dst = whole.data() + size_t(to.at(s.name).first) * e;
      for_each_run(s, [&](int64_t i, int64_t g, int64_t n) {
        std::memcpy(dst + size_t(g) * e, shard + size_t(i) * e, size_t(n) * e);
      });
    }
    shard += size_t(s.shape.numel()) * e;
  }
}

}  // namespace trellis
