#!/usr/bin/env bash
# examples/slurm/train_gpt.sbatch on a real one-node Slurm cluster started on loopback (as in
# ../shared/REFERENCE.md, "A real Slurm cluster on one machine"): munged as the munge user, then
# slurmctld and slurmd from a slurm.conf in a scratch folder, the node idle in sinfo, then
#   1. sbatch --wait -N1 -n2 with srun --mpi=pmix: 2 ranks in one MPI world ("data 2"), step lines,
#      exit code 0;
#   2. the same with TRELLIS_LAUNCHER=mpirun (the script's fallback when srun has no PMIx);
#   3. a long run stopped with scancel --signal=USR1 (what --signal=USR1@120 does before the time
#      limit): "stopping after step N: received SIGUSR1", the metrics end at step N, exit code 0;
#   4. a long run with rank 1 frozen (SIGSTOP): the collective watchdog ends the job within a
#      minute with rank 0's "collective timeout" line and a non-zero exit code.
# The daemons are stopped by their pid files when the test ends, whatever happens.
# Needs root and Debian's slurm-wlm and munge (exit 77 = skipped otherwise).
# Usage: slurm_test.sh TRAIN_GPT CONFIG [SBATCH_SCRIPT]
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
train_gpt=$(realpath "${1:?usage: slurm_test.sh TRAIN_GPT CONFIG [SBATCH_SCRIPT]}")
config=$(realpath "${2:?usage: slurm_test.sh TRAIN_GPT CONFIG [SBATCH_SCRIPT]}")
script=$(realpath "${3:-$repo/examples/slurm/train_gpt.sbatch}")
export PATH=$PATH:/usr/sbin:/sbin

for tool in slurmctld slurmd sbatch sinfo squeue scancel scontrol srun munged; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: slurm-wlm not installed (no $tool on PATH; apt-get install slurm-wlm munge)"
    exit 77
  fi
done
if [[ $(id -u) != 0 ]]; then
  echo "SKIP: needs root (runs munged as the munge user and slurmd as root)"
  exit 77
fi
if ! id munge >/dev/null 2>&1; then
  echo "SKIP: no munge user (apt-get install munge)"
  exit 77
fi
if [[ ! -x $train_gpt ]]; then
  echo "FAIL: $train_gpt is not built"
  exit 1
fi

tmp=$(mktemp -d /tmp/trellis-slurm.XXXXXX)
chmod 755 "$tmp"
export SLURM_CONF=$tmp/slurm.conf
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Stops whatever this test started, by pid file: first our jobs (their slurmstepd would outlive
# slurmd), then slurmd, slurmctld, munged.
cleanup() {
  local rc=$?
  if [[ -f $tmp/slurmctld.pid ]]; then
    scancel --quiet --user=root 2>/dev/null
    for _ in $(seq 20); do [[ -z $(squeue -h 2>/dev/null) ]] && break; sleep 0.5; done
  fi
  for d in slurmd slurmctld munged; do
    local pidfile=$tmp/$d.pid
    [[ $d == munged ]] && pidfile=$tmp/munge/munged.pid
    [[ -f $pidfile ]] || continue
    local pid
    pid=$(<"$pidfile")
    if [[ -n $pid ]] && kill "$pid" 2>/dev/null; then
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
    fi
  done
  if ((rc != 0 && rc != 77)); then
    for f in "$tmp"/slurmctld.log "$tmp"/slurmd.log "$tmp"/munge/munged.log; do
      [[ -f $f ]] && { echo "--- last lines of $f"; tail -n 20 "$f"; }
    done
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
  echo "FAIL: $*"
  exit 1
}

# --- munge: the node's key (Debian's package makes one; else a random 1024-byte key, munge:munge
# 0400), our own munged as the munge user with its socket, pid and log in the scratch folder.
key=/etc/munge/munge.key
if [[ ! -s $key ]]; then
  install -d -o munge -g munge -m 700 /etc/munge
  dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
  chown munge:munge "$key"
  chmod 400 "$key"
fi
install -d -o munge -g munge -m 755 "$tmp/munge"  # munged wants its socket folder open to all
socket=$tmp/munge/munge.socket
runuser -u munge -- munged --socket="$socket" --key-file="$key" --pid-file="$tmp/munge/munged.pid" \
  --log-file="$tmp/munge/munged.log" --seed-file="$tmp/munge/munged.seed" ||
  fail "munged did not start: $(cat "$tmp/munge/munged.log" 2>/dev/null)"
for _ in $(seq 50); do [[ -S $socket ]] && break; sleep 0.1; done
munge --socket="$socket" -n | unmunge --socket="$socket" >/dev/null || fail "munge credential round trip failed"

# --- slurm.conf: one node on loopback, state in the scratch folder, ports that are free now.
host=$(hostname)
read -r ctld_port slurmd_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
mkdir -p "$tmp/state" "$tmp/spool"
cat >"$SLURM_CONF" <<EOF
ClusterName=trellis-ci
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SchedulerType=sched/backfill
ReturnToService=2
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF

slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
slurmd -f "$SLURM_CONF" || fail "slurmd did not start"
state=
for _ in $(seq 60); do
  state=$(sinfo -h -n "$host" -o %T 2>/dev/null)
  [[ $state == idle ]] && break
  sleep 0.5
done
[[ $state == idle ]] || fail "node $host not idle in sinfo after 30 s (state '${state:-none}')"
echo "ok   cluster up: node $host idle (slurmctld :$ctld_port, slurmd :$slurmd_port)"
if grep -qw pmix <<<"$(srun --mpi=list 2>&1)"; then
  echo "     srun --mpi=list offers pmix"
else
  echo "     srun has no pmix plugin: the sbatch script will fall back to mpirun"
fi

job_exit_code() {  # ExitCode=rc:signal of a finished job
  scontrol show job "$1" 2>/dev/null | grep -o 'ExitCode=[0-9]*:[0-9]*' | head -n1 | cut -d= -f2
}

# --- 1 and 2: a short 2-rank run through each launcher.
for launcher in srun mpirun; do
  out=$tmp/job-$launcher.out
  metrics=$tmp/metrics-$launcher.jsonl
  submitted=$(TRELLIS_LAUNCHER=$launcher TRELLIS_BIN=$train_gpt TRELLIS_CONFIG=$config TRELLIS_DEVICE=cpu \
    TRELLIS_SET="train.steps=20 log.every=5 log.metrics_file=$metrics" \
    timeout 200 sbatch --wait --parsable -N1 -n2 --time=5 --chdir="$repo" --output="$out" --job-name="ci-$launcher" "$script")
  rc=$?
  job=${submitted%%;*}
  echo "---- job $job output ($launcher), without the resolved config:"
  grep -vE '^([a-z_0-9]+ = .*|\[[a-z0-9_]+\]|# resolved config|)$' "$out" 2>/dev/null
  echo "----"
  ((rc == 0)) || fail "$launcher: sbatch --wait exited $rc (job $job, ExitCode $(job_exit_code "$job"))"
  [[ $(job_exit_code "$job") == 0:0 ]] || fail "$launcher: job $job ExitCode $(job_exit_code "$job"), want 0:0"
  grep -q "launcher $launcher:" "$out" || fail "$launcher: the script did not use $launcher (see output)"
  grep -q "layout tensor 1 x pipeline 1 x data 2" "$out" || fail "$launcher: no 'data 2' in the start line: the ranks did not form one world"
  steps=$(grep -cE '^step +[0-9]+/20 \| loss' "$out")
  ((steps >= 4)) || fail "$launcher: $steps step lines, want >= 4"
  grep -q "done: 20 steps" "$out" || fail "$launcher: no 'done: 20 steps'"
  grep -qiE 'error|abort|terminate called' "$out" && fail "$launcher: an error in the output"
  echo "ok   sbatch -N1 -n2 via $launcher: data 2, $steps step lines, done: 20 steps, ExitCode 0:0"
done

# --- 3: stop a long run with SIGUSR1 to its tasks, as --signal=USR1@120 does before the limit.
out=$tmp/job-stop.out
metrics=$tmp/metrics-stop.jsonl
job=$(TRELLIS_BIN=$train_gpt TRELLIS_CONFIG=$config TRELLIS_DEVICE=cpu \
  TRELLIS_SET="train.steps=100000 log.every=1 log.metrics_file=$metrics" \
  sbatch --parsable -N1 -n2 --time=5 --chdir="$repo" --output="$out" --job-name=ci-stop "$script")
job=${job%%;*}
[[ -n $job ]] || fail "sbatch of the long run failed"
for _ in $(seq 120); do
  n=$(grep -c '"step"' "$metrics" 2>/dev/null)
  ((${n:-0} >= 5)) && break
  [[ -z $(squeue -h -j "$job" 2>/dev/null) ]] && break
  sleep 0.5
done
((${n:-0} >= 5)) || { cat "$out"; fail "the long run showed no steps in 60 s"; }
scancel --signal=USR1 "$job" || fail "scancel --signal=USR1 $job failed"
for _ in $(seq 120); do
  [[ -z $(squeue -h -j "$job" 2>/dev/null) ]] && break
  sleep 0.5
done
echo "---- job $job output (stopped with SIGUSR1), last lines:"
tail -n 8 "$out"
echo "----"
[[ -z $(squeue -h -j "$job" 2>/dev/null) ]] || fail "job $job still running 60 s after SIGUSR1"
[[ $(job_exit_code "$job") == 0:0 ]] || fail "stopped job $job ExitCode $(job_exit_code "$job"), want 0:0"
stops=$(grep -c "stopping after step" "$out")
((stops == 1)) || fail "'stopping after step' printed $stops times, want 1"
stop_step=$(sed -n 's/^stopping after step \([0-9]*\): received SIGUSR1$/\1/p' "$out")
[[ -n $stop_step ]] || fail "no 'stopping after step N: received SIGUSR1'"
last=$(python3 -c '
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1]) if "\"step\"" in l and "\"split\"" not in l]
print(steps[-1])' "$metrics")
[[ $last == "$stop_step" ]] || fail "metrics end at step $last, the run said it stopped after $stop_step"
grep -q "done: $stop_step steps" "$out" || fail "no 'done: $stop_step steps'"
echo "ok   scancel --signal=USR1: stopping after step $stop_step, metrics end at step $last, ExitCode 0:0"

# --- 4: one task frozen (SIGSTOP: a hung process, as the others see it); the collective watchdog
# (parallel.collective_timeout_s = 3) ends the whole job within a minute, naming what rank 0 waited
# for, instead of leaving it to the time limit.
out=$tmp/job-hang.out
metrics=$tmp/metrics-hang.jsonl
job=$(TRELLIS_BIN=$train_gpt TRELLIS_CONFIG=$config TRELLIS_DEVICE=cpu \
  TRELLIS_SET="train.steps=100000 log.every=1 log.metrics_file=$metrics parallel.collective_timeout_s=3" \
  sbatch --parsable -N1 -n2 --time=5 --chdir="$repo" --output="$out" --job-name=ci-hang "$script")
job=${job%%;*}
[[ -n $job ]] || fail "sbatch of the run to freeze failed"
for _ in $(seq 120); do
  n=$(grep -c '"step"' "$metrics" 2>/dev/null)
  ((${n:-0} >= 3)) && break
  [[ -z $(squeue -h -j "$job" 2>/dev/null) ]] && break
  sleep 0.5
done
((${n:-0} >= 3)) || { cat "$out"; fail "the run to freeze showed no steps in 60 s"; }
frozen=
for pid in $(pgrep -f "log.metrics_file=$metrics"); do  # the task of rank 1 (SLURM_PROCID or Open MPI's rank)
  if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxE 'SLURM_PROCID=1|OMPI_COMM_WORLD_RANK=1'; then
    [[ $(tr '\0' ' ' <"/proc/$pid/cmdline") == *train_gpt* ]] && frozen=$pid && break
  fi
done
[[ -n $frozen ]] || fail "rank 1's process of job $job not found"
kill -STOP "$frozen"
t0=$SECONDS
for _ in $(seq 120); do
  [[ -z $(squeue -h -j "$job" 2>/dev/null) ]] && break
  sleep 0.5
done
waited=$((SECONDS - t0))
kill -KILL "$frozen" 2>/dev/null
echo "---- job $job output (rank 1 frozen), lines with 'timeout':"
grep -i timeout "$out"
echo "----"
[[ -z $(squeue -h -j "$job" 2>/dev/null) ]] || fail "job $job still running 60 s after rank 1 froze"
grep -qE '^\[rank 0/2 [^]]+\] collective timeout: waited [0-9]+ s for .+ on .+parallel.collective_timeout_s' "$out" ||
  fail "no collective timeout line of rank 0 in the job's output"
[[ $(job_exit_code "$job") != 0:0 ]] || fail "job $job ExitCode 0:0 after a collective timeout"
echo "ok   rank 1 frozen under srun: the job ended after ${waited} s, ExitCode $(job_exit_code "$job"), rank 0 named its wait"
echo PASS
