// train_gpt --plan: what a layout would hold on each rank and compute each step, printed without
// training, for any world size (a study of layouts for 64 GPUs runs on a laptop).
#pragma once
#include "launcher/train_config.h"

namespace trellis {

// Prints the plan of `cfg` on `world` ranks to stdout. Throws UserError when the layout does not
// fit the world or the model (the same lines a run would give).
void print_plan(const Config& cfg, int world);

}  // namespace trellis
