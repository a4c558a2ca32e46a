// Which source tree this build came from, for the run's start line, its metrics file and
// env_report: `git describe --always --dirty` at build time (cmake/trellis_version.cmake).
#pragma once

namespace trellis {

const char* source_version();  // e.g. "7faaa87c1d2e" or "7faaa87c1d2e-dirty"; "unknown" outside git

}  // namespace trellis
