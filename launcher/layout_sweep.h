// train_gpt --layouts: every tensor x pipeline x data split of a world for one config, at the same
// global batch, each with its largest rank's device memory, pipeline bubble and bytes sent a step
// over each group, and whether it fits a device; what a study of layouts starts from, before any GPU
// is spent on it.
#pragma once
#include "launcher/train_config.h"

namespace trellis {

// Prints the table to stdout. Layouts the model or batch does not allow are listed after it with
// the reason a run of them would give. `device_memory_gib` > 0: the device to fit in (else this
// machine's GPU, if it has one).
void print_layouts(const Config& cfg, int world, double device_memory_gib);

}  // namespace trellis
