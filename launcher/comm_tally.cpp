// CommTally (launcher/comm_tally.h).
#include "launcher/comm_tally.h"

#include "core/alloc.h"

namespace trellis {

CommTally::CommTally(ProcessGroups& groups, bool experts) {
  for (size_t i = 0; i < std::size(kKinds); ++i) {
    const GroupKind k = kKinds[i];
    if (k == GroupKind::embedding && !groups.in_embedding_group()) continue;
    if ((k == GroupKind::expert || k == GroupKind::expert_data) && !experts) continue;
    Communicator& c = groups.group(k);
    if (c.size() > 1) groups_.emplace_back(i, &c);
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
  for (size_t i = 0; i < groups_.size(); ++i) o.add(group_kind_name(kKinds[groups_[i].first]), int64_t(step_[i].bytes));
  return o;
}

std::string CommTally::text() const {
  std::string s;
  for (size_t i = 0; i < groups_.size(); ++i) {
    if (step_[i].ops == 0) continue;
    s += (s.empty() ? "" : ", ") + std::string(group_kind_name(kKinds[groups_[i].first])) + " " +
         format_decimal_bytes(double(step_[i].bytes)) + " in " +
         std::to_string(step_[i].ops) + (s.empty() ? " operations" : "");
  }
  return s.empty() ? "none" : s;
}

CommTally::ByKind CommTally::bytes_by_kind() const {
  ByKind out{};
  for (size_t i = 0; i < groups_.size(); ++i) out[groups_[i].first] = step_[i].bytes;
  return out;
}

std::string CommTally::text(const ByKind& bytes) {
  std::string s;
  for (size_t k = 0; k < bytes.size(); ++k)
    if (bytes[k] > 0)
      s += (s.empty() ? "" : ", ") + std::string(group_kind_name(kKinds[k])) + " " + format_decimal_bytes(double(bytes[k]));
  return s.empty() ? "none" : s;
}

}  // namespace trellis
