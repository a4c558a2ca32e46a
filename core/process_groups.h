// The rank layout (tensor fastest, then data, then pipeline; experts carved out of data), the
// pure functions that derive every group from it, and ProcessGroups: this rank's communicators.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "core/comm.h"

namespace trellis {

class Runtime;

// Sizes of the parallel dimensions. world = tensor * data * pipeline; expert divides data.
struct Layout {
  int tensor = 1, pipeline = 1, data = 1, expert = 1;
  int world() const { return tensor * data * pipeline; }
};

// Checks and derives data = world / (tensor * pipeline). Throws UserError naming parallel.tensor,
// parallel.pipeline, parallel.expert and the world size when they do not fit.
Layout make_layout(int world, int tensor, int pipeline, int expert = 1);

// Where a rank sits: rank = tensor + T * (data + D * pipeline).
struct RankCoords {
  int tensor = 0, data = 0, pipeline = 0;
  int expert = 0;       // index within the expert group       (= data % E)
  int expert_data = 0;  // index within the expert-data group  (= data / E)
  bool operator==(const RankCoords&) const = default;
};
RankCoords coords_of(int rank, const Layout& l);
int rank_of(int tensor, int data, int pipeline, const Layout& l);

enum class GroupKind {
  tensor,       // T ranks: same (data, pipeline); adjacent world ranks
  data,         // D ranks: same (tensor, pipeline)
  pipeline,     // P ranks: same (tensor, data), ordered by stage
  embedding,    // first and last stage of each pipeline group (one rank when P = 1)
  expert,       // E consecutive data ranks of one (tensor, pipeline) slice
  expert_data,  // D/E ranks of one (tensor, pipeline) slice with the same expert index
};
const char* group_kind_name(GroupKind k);  // "tensor", "data", ...

// Every group of one kind, each listing world ranks in group-rank order (ascending world rank).
// Together the groups of a kind partition the world, except embedding (middle stages are in none).
std::vector<std::vector<int>> group_members(GroupKind kind, const Layout& l);
// Index into group_members(kind, l) of the group holding `rank`; -1 when it is in none.
int group_index(GroupKind kind, int rank, const Layout& l);

// World rank of the previous / next pipeline stage of `rank` (same tensor and data index), or -1
// at the first / last stage. Unlike Megatron we do not wrap around: a schedule that sends past
// the last stage is a bug we want to see.
int pipeline_prev_rank(int rank, const Layout& l);
int pipeline_next_rank(int rank, const Layout& l);

// This rank's communicators, built once from the world, the layout and the runtime (collective
// over `world`: every rank constructs it at the same point). Passed explicitly, never global.
// Each group's ranks are ordered by world rank, so pipeline().rank() == coords().pipeline,
// data().rank() == coords().data, tensor().rank() == coords().tensor, expert().rank() ==
// coords().expert, expert_data().rank() == coords().expert_data. Destroy before MPI_Finalize.
class ProcessGroups {
 public:
  ProcessGroups(MPI_Comm world, const Layout& layout, Runtime& rt);
  ~ProcessGroups();
  ProcessGroups(const ProcessGroups&) = delete;
  ProcessGroups& operator=(const ProcessGroups&) = delete;

  const Layout& layout() const { return layout_; }
  const RankCoords& coords() const { return coords_; }
  int rank() const { return rank_; }  // world rank

  Communicator& world() { return *world_; }
  Communicator& tensor() { return *groups_[int(GroupKind::tensor)]; }
  Communicator& data() { return *groups_[int(GroupKind::data)]; }
  Communicator& pipeline() { return *groups_[int(GroupKind::pipeline)]; }
  Communicator& expert() { return *groups_[int(GroupKind::expert)]; }
  Communicator& expert_data() { return *groups_[int(GroupKind::expert_data)]; }
  // Only ranks of the first and last stage belong to an embedding group; fatal elsewhere.
  bool in_embedding_group() const { return groups_[int(GroupKind::embedding)] != nullptr; }
  Communicator& embedding();
  Communicator& group(GroupKind k);

  bool is_first_stage() const { return coords_.pipeline == 0; }
  bool is_last_stage() const { return coords_.pipeline == layout_.pipeline - 1; }
  // Previous / next stage as world ranks, -1 at the ends (see pipeline_prev_rank).
  int pipeline_prev_rank() const { return prev_rank_; }
  int pipeline_next_rank() const { return next_rank_; }
  // The same peers as ranks within pipeline() (what send/recv take), -1 at the ends.
  int pipeline_prev_peer() const { return is_first_stage() ? -1 : coords_.pipeline - 1; }
  int pipeline_next_peer() const { return is_last_stage() ? -1 : coords_.pipeline + 1; }

 private:
  Layout layout_;
  RankCoords coords_;
  int rank_ = 0;
  int prev_rank_ = -1, next_rank_ = -1;
  std::unique_ptr<Communicator> world_;
  std::unique_ptr<Communicator> groups_[6];  // indexed by GroupKind; embedding may be null
};

}  // namespace trellis
