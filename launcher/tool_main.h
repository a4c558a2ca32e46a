// The main() of the one-process tools (generate, export_hf, prepare_data, pipeline_predict, tokenize): bad
// input ends in one "error: ..." line and exit status 1, never an abort with a backtrace.
#pragma once
#include <cstdio>
#include <exception>
#include <new>

#include "core/error.h"

namespace trellis {

// Runs `run`; `out_of_memory` says what failed to fit (what the tool holds in memory).
inline int run_tool(int (*run)(int, char**), int argc, char** argv, const char* out_of_memory = "out of memory") {
  try {
    return run(argc, argv);
  } catch (const UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: %s\n", out_of_memory);
  } catch (const std::exception& e) {  // a bug, but one line and an exit status, not an abort
    std::fprintf(stderr, "error: unexpected: %s\n", e.what());
  }
  return 1;
}

}  // namespace trellis
