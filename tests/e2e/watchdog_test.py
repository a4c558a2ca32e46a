#!/usr/bin/env python3
"""The collective watchdog (parallel.collective_timeout_s): a rank that stops makes the others
abort the job within the timeout, with one line naming what they waited for, instead of hanging.

`mpirun -np 2 train_gpt` on the CPU (data = 2) trains a few steps; then rank 1 is frozen with
SIGSTOP (what a hung process or a lost node looks like to the others). Rank 0 waits for it in a
collective. Checks: with collective_timeout_s = 3 the job ends within 60 s of the freeze, exit code
non-zero, and rank 0's stderr holds "[rank 0/2 ...] collective timeout: waited N s for <op> on
<where>" naming parallel.collective_timeout_s, N >= 3. A second run with the watchdog off (0) is
still running 15 s after the same freeze (then killed): the watchdog, not something else, ended it.

Usage: watchdog_test.py TRAIN_GPT MPIEXEC CONFIG
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from preemption_test import START_TIMEOUT, steps_in

TIMEOUT_S = 3
LINE = re.compile(r"^\[rank 0/2 [^\]]+\] collective timeout: waited (\d+) s for (.+) on (.+?)(?: \(the last|;)")


def rank_pid(marker, rank):
    """The PID of the train_gpt process of `rank` whose command line holds `marker`."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if marker in cmd and f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return int(pid)
    return None


def run(binary, mpiexec, config, tmp, tag, timeout_s, wait_s):
    """Starts the 2-rank run, freezes rank 1 after 3 steps; returns (exit code or None, stderr, seconds)."""
    metrics = os.path.join(tmp, tag + ".jsonl")
    cmd = [mpiexec, "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "OMP_NUM_THREADS", binary, config,
           "--set", "train.steps=100000", "--set", "train.device=cpu", "--set", "log.every=1",
           "--set", "log.val_every=0", "--set", "log.metrics_file=" + metrics,
           "--set", f"parallel.collective_timeout_s={timeout_s}"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    err_path = os.path.join(tmp, tag + ".err")
    with open(os.path.join(tmp, tag + ".out"), "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        frozen = other = None
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while len(steps_in(metrics)) < 3 and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            frozen, other = rank_pid(metrics, 1), rank_pid(metrics, 0)
            if proc.poll() is None and len(steps_in(metrics)) >= 3 and frozen is None:
                print("SKIP: the ranks' processes are not found by OMPI_COMM_WORLD_RANK (not Open MPI)")
                sys.exit(77)
            if proc.poll() is not None or frozen is None:
                sys.exit(f"FAIL {tag}: the run did not reach 3 steps with rank 1 found (exit {proc.poll()})")
            os.kill(frozen, signal.SIGSTOP)
            t0 = time.monotonic()
            try:
                rc = proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                rc = None
            seconds = time.monotonic() - t0
        finally:
            if proc.poll() is None:
                proc.kill()
            for pid in (frozen, other):  # no rank left behind, waiting or stopped
                for sig in (signal.SIGKILL, signal.SIGCONT):
                    try:
                        if pid is not None:
                            os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
            proc.wait()
    return rc, open(err_path).read(), seconds


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    binary, mpiexec, config = sys.argv[1:4]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        rc, err, seconds = run(binary, mpiexec, config, tmp, "watched", TIMEOUT_S, 60)
        lines = [m for m in map(LINE.match, err.splitlines()) if m]
        good = (rc is not None and rc != 0 and len(lines) >= 1 and int(lines[0].group(1)) >= TIMEOUT_S
                and "parallel.collective_timeout_s" in err)
        ok &= good
        what = f"'{lines[0].group(2)}' on '{lines[0].group(3)}'" if lines else "no timeout line"
        print(f"{'ok  ' if good else 'FAIL'} rank 1 frozen, timeout {TIMEOUT_S} s: exit {rc} after {seconds:.1f} s; "
              f"rank 0 waited for {what}")
        if not good:
            print(err[-3000:])
        rc, err, seconds = run(binary, mpiexec, config, tmp, "unwatched", 0, 15)
        good = rc is None and "collective timeout" not in err
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} rank 1 frozen, watchdog off: {'still waiting' if rc is None else f'exit {rc}'} "
              f"after {seconds:.1f} s")
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
