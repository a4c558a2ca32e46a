#!/usr/bin/env bash
# Session call 1 (1×H200): ln_cap_probe.cu, the layer-norm backward's variants timed right after a
# large GEMM at the power cap, with the SM clock and power sampled every 50 ms.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
echo "=== probe build $(date +%T)"
nvcc -O3 -std=c++17 -arch=sm_90 -I. bench/sessions/2026-12-02a/ln_cap_probe.cu core/dtype.cpp -lcublas \
  -o /tmp/ln_cap_probe > "$out/probe_build.log" 2>&1 || { tail -5 "$out/probe_build.log"; exit 1; }
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active \
  --format=csv,noheader,nounits -i 0 -lms 50 > "$out/smi.csv" 2>&1 &
smi=$!
echo "=== probe $(date +%T)"
timeout 240 /tmp/ln_cap_probe 2>&1 | tee "$out/probe.log"
kill $smi
python3 - "$out" <<'PY'
import sys, statistics as st
rows = [l.split(", ") for l in open(f"{sys.argv[1]}/smi.csv") if l.count(",") >= 3]
busy = [r for r in rows if float(r[2]) > 300]
if busy:
    clk = [float(r[1]) for r in busy]; pw = [float(r[2]) for r in busy]
    print(f"samples > 300 W: {len(busy)} of {len(rows)}; SM clock median {st.median(clk):.0f} MHz "
          f"(min {min(clk):.0f}, max {max(clk):.0f}); power median {st.median(pw):.0f} W (max {max(pw):.0f})")
PY
echo "=== done $(date +%T)"
