// The bytes each process group sent in one training step on this rank (Communicator::traffic):
// the step record's comm_bytes, and the run's closing line, so that a slow layout shows where its
// communication goes.
#pragma once
#include <array>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "core/comm.h"
#include "core/process_groups.h"
#include "launcher/metrics.h"

namespace trellis {

class CommTally {
 public:
  // The groups of more than one rank this rank belongs to; the expert groups only for a model
  // with experts (without, the expert-data group is the data group, and the expert group idle).
  CommTally(ProcessGroups& groups, bool experts);
  bool any() const { return !groups_.empty(); }
  void start();  // before a step
  void stop();   // after it: the bytes and operations since start()
  // {"tensor": bytes, "data": bytes, ...} of the last step.
  JsonObject json() const;
  // "data 1.21 GB in 6 operations, pipeline 50.3 MB in 8": of the last step.
  std::string text() const;

  // The last step's bytes by group kind, in kKinds' order (0 for a group this rank is not in):
  // what ranks compare (the most any rank sent), and its text ("pipeline 50.3 MB, embedding 1.2 MB").
  static constexpr GroupKind kKinds[] = {GroupKind::tensor,    GroupKind::data,   GroupKind::pipeline,
                                         GroupKind::embedding, GroupKind::expert, GroupKind::expert_data};
  using ByKind = std::array<uint64_t, std::size(kKinds)>;
  ByKind bytes_by_kind() const;
  static std::string text(const ByKind& bytes);

 private:
  std::vector<std::pair<size_t, Communicator*>> groups_;  // index in kKinds, communicator
  std::vector<Communicator::Traffic> at_start_, step_;
};

}  // namespace trellis
