// Gathering stage tensors into the whole-model layout and back, parameter by parameter by name.
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

}  // namespace

WholeModelLayout::WholeModelLayout(const GPTConfig& cfg, int p, int v) : whole(GPT::parameter_specs(cfg)) {
  for (int r = 0; r < p; ++r) stage.push_back(GPT::parameter_specs(cfg, GPTPart::of_rank(cfg, p, v, r)));
}

int64_t WholeModelLayout::whole_numel() const { return numel_of(whole); }
int64_t WholeModelLayout::stage_numel(int rank) const { return numel_of(stage.at(size_t(rank))); }

std::vector<char> gather_whole(Runtime& rt, Communicator* pipeline, const WholeModelLayout& layout, const Tensor& t) {
  const int rank = pipeline ? pipeline->rank() : 0, p = layout.pipeline();
  TRELLIS_CHECK(t.numel() == layout.stage_numel(rank), "gather_whole: tensor does not match this stage");
  std::vector<char> mine = to_host(rt, t);
  if (p == 1) return mine;
  if (rank != 0) {
    pipeline->send(Tensor(mine.data(), t.dtype, Device::CPU(), {t.numel()}), 0);
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

void scatter_whole(Runtime& rt, const WholeModelLayout& layout, int rank, const std::vector<char>& whole,
                   const Tensor& t) {
  TRELLIS_CHECK(t.numel() == layout.stage_numel(rank), "scatter_whole: tensor does not match this stage");
  const size_t e = dtype_size(t.dtype);
  TRELLIS_CHECK(whole.size() == size_t(layout.whole_numel()) * e, "scatter_whole: whole-model copy has the wrong size");
  const auto from = offsets(layout.whole);
  std::vector<char> mine(t.nbytes());
  for (const auto& [name, at] : offsets(layout.stage[size_t(rank)]))
    std::memcpy(mine.data() + size_t(at.first) * e, whole.data() + size_t(from.at(name).first) * e, size_t(at.second) * e);
  copy(rt, t, Tensor(mine.data(), t.dtype, Device::CPU(), t.shape));
  rt.synchronize();
}

}  // namespace trellis
