// The bytes each process group sent in one training step on this rank (Communicator::traffic):
// the step record's comm_bytes, and the run's closing line, so that a slow layout shows where its
// communication goes.
#pragma once
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

 private:
  std::vector<std::pair<const char*, Communicator*>> groups_;
  std::vector<Communicator::Traffic> at_start_, step_;
};

}  // namespace trellis
