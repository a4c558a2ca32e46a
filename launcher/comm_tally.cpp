// CommTally (launcher/comm_tally.h).
#include "launcher/comm_tally.h"

#include "core/alloc.h"

namespace trellis {

CommTally::CommTally(ProcessGroups& groups, bool experts) {
  for (const GroupKind k : {GroupKind::tensor, GroupKind::data, GroupKind::pipeline, GroupKind::embedding,
                            GroupKind::expert, GroupKind::expert_data}) {
    if (k == GroupKind::embedding && !groups.in_embedding_group()) continue;
    if ((k == GroupKind::expert || k == GroupKind::expert_data) && !experts) continue;
    Communicator& c = groups.group(k);
    if (c.size() > 1) groups_.emplace_back(group_kind_name(k), &c);
  }
  at_start_.resize(groups_.size());
  step_.resize(groups_.size());
}

void CommTally::start() {
  for (size_t i = 0; i < groups_.size(); ++i) at_start_[i] = groups_[i].second->traffic();
}

void CommTally::stop() {
  for (size_t i = 0; i < groups_.size(); ++i) {
    const Communicator::Traffic now = groups_[i].second->traffic();
    step_[i] = {now.bytes - at_start_[i].bytes, now.ops - at_start_[i].ops};
  }
}

JsonObject CommTally::json() const {
  JsonObject o;
  for (size_t i = 0; i < groups_.size(); ++i) o.add(groups_[i].first, int64_t(step_[i].bytes));
  return o;
}

std::string CommTally::text() const {
  std::string s;
  for (size_t i = 0; i < groups_.size(); ++i) {
    if (step_[i].ops == 0) continue;
    s += (s.empty() ? "" : ", ") + std::string(groups_[i].first) + " " + format_decimal_bytes(double(step_[i].bytes)) + " in " +
         std::to_string(step_[i].ops) + (s.empty() ? " operations" : "");
  }
  return s.empty() ? "none" : s;
}

}  // namespace trellis
