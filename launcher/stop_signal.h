// Preemption: SIGUSR1 (sbatch --signal=USR1@N; mpirun forwards it), SIGTERM (srun, a plain
// process) and a first Ctrl-C (SIGINT; a second quits at once) ask the run to stop. Ranks receive signals at different moments, so at the end of
// every step all ranks agree (one tiny all-reduce) and stop after the same step.
#pragma once
#include <mpi.h>

#include "core/watchdog.h"

namespace trellis {

// Installs the handlers (idempotent), and one for SIGBUS that reports a memory-mapped file changed
// under the run in one line and exits 1.
void install_stop_handlers();
// True on every rank if any rank has received a stop signal (collective over `comm`, watched).
bool stop_requested(MPI_Comm comm, Watchdog* watchdog = nullptr);
const char* stop_signal_name();

}  // namespace trellis
