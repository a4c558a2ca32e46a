// Layout checks, the pure group arithmetic, and ProcessGroups (one MPI_Comm_split per kind).
#include "core/process_groups.h"

#include <algorithm>

#include "core/runtime.h"

namespace trellis {

Layout make_layout(int world, int tensor, int pipeline, int expert) {
  auto positive = [](const char* key, int v) {
    if (v < 1) throw UserError(std::string(key) + " = " + std::to_string(v) + " must be at least 1");
  };
  if (world < 1) throw UserError("world size " + std::to_string(world) + " must be at least 1");
  positive("parallel.tensor", tensor);
  positive("parallel.pipeline", pipeline);
  positive("parallel.expert", expert);
  if (world % (int64_t(tensor) * pipeline) != 0)
    throw UserError("parallel.tensor = " + std::to_string(tensor) + " times parallel.pipeline = " +
                    std::to_string(pipeline) + " does not divide the world size " + std::to_string(world) +
                    " (number of ranks)");
  Layout l;
  l.tensor = tensor;
  l.pipeline = pipeline;
  l.data = world / (tensor * pipeline);
  l.expert = expert;
  if (l.data % expert != 0)
    throw UserError("parallel.expert = " + std::to_string(expert) + " does not divide the data-parallel size " +
                    std::to_string(l.data) + " (world " + std::to_string(world) + " / (parallel.tensor " +
                    std::to_string(tensor) + " * parallel.pipeline " + std::to_string(pipeline) + "))");
  return l;
}

RankCoords coords_of(int rank, const Layout& l) {
  TRELLIS_CHECK(rank >= 0 && rank < l.world(), "rank " + std::to_string(rank) + " outside the layout");
  RankCoords c;
  c.tensor = rank % l.tensor;
  c.data = (rank / l.tensor) % l.data;
  c.pipeline = rank / (l.tensor * l.data);
  c.expert = c.data % l.expert;
  c.expert_data = c.data / l.expert;
  return c;
}

int rank_of(int tensor, int data, int pipeline, const Layout& l) {
  return tensor + l.tensor * (data + l.data * pipeline);
}

const char* group_kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::tensor: return "tensor";
    case GroupKind::data: return "data";
    case GroupKind::pipeline: return "pipeline";
    case GroupKind::embedding: return "embedding";
    case GroupKind::expert: return "expert";
    case GroupKind::expert_data: return "expert_data";
  }
  return "?";
}

std::vector<std::vector<int>> group_members(GroupKind kind, const Layout& l) {
  const int T = l.tensor, D = l.data, P = l.pipeline, E = l.expert;
  std::vector<std::vector<int>> groups;
  switch (kind) {
    case GroupKind::tensor:
      for (int p = 0; p < P; ++p)
        for (int d = 0; d < D; ++d) {
          auto& g = groups.emplace_back();
          for (int t = 0; t < T; ++t) g.push_back(rank_of(t, d, p, l));
        }
      break;
    case GroupKind::data:
      for (int p = 0; p < P; ++p)
        for (int t = 0; t < T; ++t) {
          auto& g = groups.emplace_back();
          for (int d = 0; d < D; ++d) g.push_back(rank_of(t, d, p, l));
        }
      break;
    case GroupKind::pipeline:
    case GroupKind::embedding:
      for (int d = 0; d < D; ++d)
        for (int t = 0; t < T; ++t) {
          auto& g = groups.emplace_back();
          if (kind == GroupKind::pipeline) {
            for (int p = 0; p < P; ++p) g.push_back(rank_of(t, d, p, l));
          } else {
            g.push_back(rank_of(t, d, 0, l));
            if (P > 1) g.push_back(rank_of(t, d, P - 1, l));
          }
        }
      break;
    case GroupKind::expert:
      for (int p = 0; p < P; ++p)
        for (int t = 0; t < T; ++t)
          for (int b = 0; b < D / E; ++b) {
            auto& g = groups.emplace_back();
            for (int e = 0; e < E; ++e) g.push_back(rank_of(t, b * E + e, p, l));
          }
      break;
    case GroupKind::expert_data:
      for (int p = 0; p < P; ++p)
        for (int t = 0; t < T; ++t)
          for (int e = 0; e < E; ++e) {
            auto& g = groups.emplace_back();
            for (int b = 0; b < D / E; ++b) g.push_back(rank_of(t, b * E + e, p, l));
          }
      break;
  }
  return groups;
}

int group_index(GroupKind kind, int rank, const Layout& l) {
  const auto groups = group_members(kind, l);
  for (size_t i = 0; i < groups.size(); ++i)
    if (std::find(groups[i].begin(), groups[i].end(), rank) != groups[i].end()) return int(i);
  return -1;
}

int pipeline_prev_rank(int rank, const Layout& l) {
  RankCoords c = coords_of(rank, l);
  return c.pipeline == 0 ? -1 : rank_of(c.tensor, c.data, c.pipeline - 1, l);
}

int pipeline_next_rank(int rank, const Layout& l) {
  RankCoords c = coords_of(rank, l);
  return c.pipeline == l.pipeline - 1 ? -1 : rank_of(c.tensor, c.data, c.pipeline + 1, l);
}

// ---- ProcessGroups ----

ProcessGroups::ProcessGroups(MPI_Comm world, const Layout& layout, Runtime& rt) : layout_(layout) {
  int size = 0;
  TRELLIS_MPI_CHECK(MPI_Comm_rank(world, &rank_));
  TRELLIS_MPI_CHECK(MPI_Comm_size(world, &size));
  TRELLIS_CHECK(size == layout_.world(), "layout tensor " + std::to_string(layout_.tensor) + " x data " +
                                             std::to_string(layout_.data) + " x pipeline " +
                                             std::to_string(layout_.pipeline) + " does not match the world size " +
                                             std::to_string(size));
  coords_ = coords_of(rank_, layout_);
  prev_rank_ = trellis::pipeline_prev_rank(rank_, layout_);
  next_rank_ = trellis::pipeline_next_rank(rank_, layout_);
  world_ = Communicator::create(world, rt, "world");
  for (GroupKind k : {GroupKind::tensor, GroupKind::data, GroupKind::pipeline, GroupKind::embedding,
                      GroupKind::expert, GroupKind::expert_data}) {
    int color = group_index(k, rank_, layout_);
    MPI_Comm split = MPI_COMM_NULL;
    // Key = world rank: group ranks follow the ascending order of group_members.
    TRELLIS_MPI_CHECK(MPI_Comm_split(world, color < 0 ? MPI_UNDEFINED : color, rank_, &split));
    if (split == MPI_COMM_NULL) continue;  // a middle pipeline stage has no embedding group
    groups_[int(k)] = Communicator::create(split, rt, group_kind_name(k));
    TRELLIS_MPI_CHECK(MPI_Comm_free(&split));  // the Communicator holds its own dup
  }
}

ProcessGroups::~ProcessGroups() = default;

Communicator& ProcessGroups::embedding() {
  TRELLIS_CHECK(in_embedding_group(), "rank " + std::to_string(rank_) + " (pipeline stage " +
                                          std::to_string(coords_.pipeline) + ") is in no embedding group");
  return *groups_[int(GroupKind::embedding)];
}

Communicator& ProcessGroups::group(GroupKind k) {
  if (k == GroupKind::embedding) return embedding();
  return *groups_[int(k)];
}

}  // namespace trellis
