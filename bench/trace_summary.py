#!/usr/bin/env python3
"""Summarizes a `log.trace_step` Chrome trace (one rank's file): how long the step's compute and
communication streams were busy, how much communication ran with no compute beside it (exposed),
and the ops with the most time. With --base (the same step traced on one GPU), each op name's time
is set against the base's, so the ops that run slower beside the collectives stand out; ops that
overlapped a collective are counted apart.

  python3 bench/trace_summary.py run.rank0.json [--base one_gpu.json] [--top 25]
"""
import argparse
import collections
import json
import sys


def load(path):
    """(compute, comm) intervals of a trace; a file that is not one ends the script with one line."""
    try:
        with open(path) as f:
            events = [e for e in json.load(f)["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"trace_summary.py: error: {path}: not a readable Chrome trace ({type(e).__name__}: {e})")
    if not events:
        sys.exit(f"trace_summary.py: error: {path}: no ops (\"ph\": \"X\" events): is it a log.trace_file trace?")
    compute = sorted(((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events if e["tid"] == 0))
    comm = sorted(((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events if e["tid"] == 1))
    return compute, comm


def union(intervals):
    merged = []
    for a, b, *_ in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return merged


def covered(a, b, merged):
    """Microseconds of [a, b) inside the merged intervals."""
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in merged)


def per_name(ops, comm_merged):
    """name -> [count, total us, us of ops that overlapped a collective, count of those]"""
    out = collections.defaultdict(lambda: [0, 0.0, 0.0, 0])
    for a, b, name in ops:
        row = out[name]
        row[0] += 1
        row[1] += b - a
        if covered(a, b, comm_merged) > 0:
            row[2] += b - a
            row[3] += 1
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("--base", help="the same step traced without communication (one GPU)")
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    if args.top < 1:
        p.error("--top must be at least 1")
    compute, comm = load(args.trace)
    start = min([c[0] for c in compute] + [c[0] for c in comm])
    end = max([c[1] for c in compute] + [c[1] for c in comm])
    cm, km = union(compute), union(comm)
    busy = sum(b - a for a, b in cm)
    comm_busy = sum(b - a for a, b in km)
    exposed = sum(b - a - covered(a, b, cm) for a, b in km)
    print(f"{args.trace}: step {(end - start) / 1e3:.2f} ms, compute busy {busy / 1e3:.2f} ms, "
          f"{len(comm)} collectives busy {comm_busy / 1e3:.2f} ms, of which exposed (no compute beside) "
          f"{exposed / 1e3:.2f} ms")
    kinds = collections.Counter()
    for a, b, name in comm:
        kinds[name.split(" ")[0] + " " + name.split(" ")[1] if " " in name else name] += b - a
    for k, us in kinds.most_common():
        print(f"  comm {k}: {us / 1e3:.2f} ms")
    rows = per_name(compute, km)
    base = per_name(load(args.base)[0], []) if args.base else {}
    hdr = f"{'op':60s} {'n':>4s} {'ms':>8s} {'ms beside comm':>14s}"
    if base:
        hdr += f" {'base ms':>8s} {'delta':>7s}"
    print(hdr)
    for name, (n, us, us_c, n_c) in sorted(rows.items(), key=lambda kv: -kv[1][1])[: args.top]:
        line = f"{name[:60]:60s} {n:4d} {us / 1e3:8.2f} {us_c / 1e3:8.2f} ({n_c:3d})"
        if base:
            b = base.get(name, [0, 0.0])[1]
            line += f" {b / 1e3:8.2f} {(us - b) / 1e3:+7.2f}"
        print(line)
    if base:
        total_base = sum(v[1] for v in base.values())
        print(f"compute ops total {busy / 1e3:.2f} ms against the base's {total_base / 1e3:.2f} ms")


if __name__ == "__main__":
    main()
