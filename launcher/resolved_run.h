// What a config resolves to on this launch: the device, the precision, the model's shape and
// options, and the micro-batches a data rank runs per step.
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/tensor.h"
#include "launcher/train_config.h"
#include "launcher/trainer.h"
#include "models/gpt.h"

namespace trellis {

struct Resolved {
  Device device;
  DType dtype;
  std::string precision;
  GPTConfig model;
  int64_t accumulation = 1;  // micro-batches per step on this rank
};

// Throws UserError when the device the config asks for is not there (or too few GPUs for the
// node's ranks). `launch.world` sets the data size, hence the accumulation.
Resolved resolve(const Config& cfg, const LaunchInfo& launch);

// 1234567 -> "1,234,567".
std::string with_commas(int64_t n);
// A number as printf's %g writes it (1e-05, 0.5, 10000), with 17 digits where 6 would not read back exactly.
std::string number_g(double v);
// Numbers as number_g writes them, comma-separated: "1,1.5,2" (LongRoPE's factor lists).
std::string number_list(const std::vector<double>& v);
// A model's Llama 3 rope scaling, "llama3 rope scaling (factor 8, low_freq_factor 1, high_freq_factor
// 4, original positions 8192)"; "" where its frequencies are unscaled.
std::string rope_scaling_text(const GPTConfig& m);

}  // namespace trellis
