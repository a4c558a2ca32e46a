// The one interface training reads samples through: sample `index` of a split, keyed by global
// sample index so the samples of a step do not depend on the layout or the micro-batch split.
// The data position in the training state is therefore just the next global sample index.
#pragma once
#include <cstdint>
#include <string>

namespace trellis {

enum class Split { train, val };

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  // Writes sample `index` of `split`: seq_len() inputs and the seq_len() next-token targets.
  virtual void sample(Split split, int64_t index, int32_t* inputs, int32_t* targets) const = 0;
  // Token ids are in [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;
  virtual int64_t seq_len() const = 0;
  // What decides the samples beyond the config, for a checkpoint to compare on resume: a token
  // file's name, size and checksum ("t.tok: N tokens, checksum HEX16"; a blend's joined by "; ");
  // empty when the config decides them all (synthetic data).
  virtual std::string identity() const { return ""; }
  // The distinct samples of `split`, after which they repeat (one epoch); 0 when unbounded or not
  // known (a blend).
  virtual int64_t distinct_samples(Split) const { return 0; }
  // Which targets the samples leave out (-1), for the log: "" when every target counts.
  virtual std::string target_mask() const { return ""; }
};

}  // namespace trellis
