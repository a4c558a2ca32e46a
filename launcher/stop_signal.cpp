// Stop-signal handlers and the per-step agreement; and the one-line report of a bus error.
#include "launcher/stop_signal.h"

#include <pthread.h>
#include <unistd.h>

#include <csignal>

#include "core/error.h"

namespace trellis {

namespace {
volatile std::sig_atomic_t received = 0;
extern "C" void on_stop_signal(int sig) {
  if (sig == SIGINT) {
    if (received != 0) {  // Ctrl-C after a stop was asked for: quit now
      std::signal(SIGINT, SIG_DFL);
      std::raise(SIGINT);
      return;
    }
    static const char note[] = "\nCtrl-C: stopping after this step (Ctrl-C again to quit now)\n";
    [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, note, sizeof note - 1);  // async-signal-safe
  }
  received = sig;
}
// A bus error is what a memory-mapped file gives when it shrank under the run (a dataset rewritten
// in place) or its disk filled (zero.offload = "nvme"): say so in one line, not a backtrace.
extern "C" void on_bus_error(int) {
  static const char note[] =
      "error: bus error (SIGBUS) on a memory-mapped file: a dataset file was truncated or replaced during the run, "
      "or the disk of zero.offload_dir is full\n";
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, note, sizeof note - 1);  // async-signal-safe
  ::_exit(1);
}
}  // namespace

void install_stop_handlers() {
  std::signal(SIGBUS, on_bus_error);
  std::signal(SIGUSR1, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  // Ctrl-C, unless the shell made this a background job that ignores it.
  struct sigaction old {};
  if (sigaction(SIGINT, nullptr, &old) == 0 && old.sa_handler != SIG_IGN) std::signal(SIGINT, on_stop_signal);
  // A launcher may start us with these signals blocked (the mask is inherited across exec); a
  // blocked stop signal would never arrive, so the run could not stop cleanly.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGUSR1);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_UNBLOCK, &stop, nullptr);
}

bool stop_requested(MPI_Comm comm, Watchdog* watchdog) {
  int any = received != 0 ? 1 : 0;
  Watchdog::Guard g(watchdog, "the step's stop-signal all_reduce", "the world");
  TRELLIS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, comm));
  return any != 0;
}

const char* stop_signal_name() {
  switch (received) {
    case SIGUSR1: return "SIGUSR1";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case 0: return nullptr;
    default: return "a signal";
  }
}

}  // namespace trellis
