"""What the layout-equivalence tests share: train_gpt under mpirun on the CPU (one OpenMP thread
per rank), the metrics and exported weights a run wrote, and the comparison with the one-rank run.
Tolerances are those of layout_equivalence.py (see there)."""
import json
import os
import struct
import subprocess
import sys

LOSS_TOL = 2e-5
WEIGHT_L2_TOL = 1e-5
WEIGHT_MAX_TOL = 1e-4
NORM_TOL = 1e-4


def launch(binary, mpiexec, config, ranks, sets, extra=()):
    """Runs train_gpt on `ranks` ranks with --set for each of `sets`; returns (cmd, result)."""
    cmd = [mpiexec, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), "-x", "OMP_NUM_THREADS=1", binary,
           config]
    for s in sets:
        cmd += ["--set", s]
    cmd += list(extra)
    return cmd, subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def run(binary, mpiexec, config, tmp, ranks, tag, sets):
    """A run that must succeed: (start record, losses, validation losses, exported weights,
    parameter names, gradient norms, stdout)."""
    metrics = os.path.join(tmp, tag + ".jsonl")
    weights = os.path.join(tmp, tag + "_weights")
    cmd, p = launch(binary, mpiexec, config, ranks, ["log.metrics_file=" + metrics, *sets],
                    ["--export-weights", weights])
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    records = [json.loads(line) for line in open(metrics)]
    losses = [r["loss"] for r in records if "step" in r and r.get("split") != "val"]
    norms = [r["grad_norm"] for r in records if "grad_norm" in r]
    val = [r["loss"] for r in records if r.get("split") == "val"]
    raw = open(os.path.join(weights, "params.f32"), "rb").read()
    names = [q["name"] for q in json.load(open(os.path.join(weights, "model.json")))["params"]]
    return records[0], losses, val, struct.unpack(f"<{len(raw) // 4}f", raw), names, norms, p.stdout


def one_line_error(binary, mpiexec, config, ranks, sets, want, extra=()):
    """A run that must stop with exit code != 0 and one line holding `want`; returns (ok, line)."""
    _, p = launch(binary, mpiexec, config, ranks, sets, extra)
    errors = [l for l in p.stderr.splitlines() if l.startswith("error:")]
    line = errors[0] if errors else (p.stderr.strip().splitlines() or [""])[-1]
    return p.returncode != 0 and len(errors) == 1 and want in line, line


def compare(loss, ref_loss, w, ref_w):
    """Max relative loss difference, max absolute and relative L2 weight differences."""
    dl = max(abs(a - b) / abs(b) for a, b in zip(loss, ref_loss))
    dw = max(abs(a - b) for a, b in zip(w, ref_w))
    l2 = (sum((a - b) ** 2 for a, b in zip(w, ref_w)) / sum(b * b for b in ref_w)) ** 0.5
    return dl, dw, l2


def layout_line(run, ref, steps):
    """(ok, text) for a run (loss, weights, norms) against the one-rank reference within tolerance."""
    (loss, w, norms), (ref_loss, ref_w, ref_norms) = run, ref
    dl, dw, l2 = compare(loss, ref_loss, w, ref_w)
    dn = max(abs(a - b) / abs(b) for a, b in zip(norms, ref_norms))
    ok = len(loss) == steps and dl <= LOSS_TOL and dn <= NORM_TOL and dw <= WEIGHT_MAX_TOL and l2 <= WEIGHT_L2_TOL
    return ok, f"loss rel diff {dl:.2e}, grad norm {dn:.2e}, weights max {dw:.2e}, rel L2 {l2:.2e}"


def check_resumes(run, check, tmp, ref_loss, ref_w, steps):
    """Stop after step 3 and resume: bitwise on one rank; from tensor 2 onto one rank, as the
    uninterrupted run. run(ranks, tag, *sets) runs the test's model; the one-rank checkpoint stays in
    tmp/ckpt1 for the test's refusals."""
    for ranks, what, sets in [(1, "one rank", []), (2, "tensor 2 -> one rank", ["parallel.tensor=2"])]:
        ckpt = os.path.join(tmp, f"ckpt{ranks}")
        run(ranks, f"stop{ranks}", "checkpoint.dir=" + ckpt, "train.stop_after=3", *sets)
        _, loss, _, w, _, _, _ = run(1, f"resume{ranks}", "checkpoint.dir=" + ckpt)
        dl, dw, l2 = compare(loss, ref_loss[3:], w, ref_w)
        exact = ranks == 1 and loss == ref_loss[3:] and list(w) == list(ref_w)
        check(exact if ranks == 1 else (dl <= LOSS_TOL and dw <= WEIGHT_MAX_TOL and l2 <= WEIGHT_L2_TOL),
              f"resume, {what}: steps 4-{steps} loss rel diff {dl:.2e}, weights max {dw:.2e}" +
              (" (bitwise)" if exact else ""))


def short_checkpoint(binary, mpiexec, config, tmp, tag, sets=()):
    """A 2-step one-rank CPU run's checkpoint.dir, tmp/tag: the source of the tests' init_from refusals."""
    ckpt = os.path.join(tmp, tag)
    run(binary, mpiexec, config, tmp, 1, tag, ["train.device=cpu", "train.steps=2", "checkpoint.dir=" + ckpt, *sets])
    return ckpt


def check_layouts(run, check, layouts, ref, steps, ref_val=None):
    """Each (ranks, what, sets) of `layouts` run (run(ranks, tag, *sets) -> equivalence.run's tuple)
    against ref = (losses, weights, gradient norms) of one rank, one line each; with ref_val (one
    rank's validation losses), a second line checks each layout's against them (rel 1e-5)."""
    for i, (ranks, what, sets) in enumerate(layouts):
        _, loss, val, w, _, norms, _ = run(ranks, f"l{i}", *sets)
        ok, text = layout_line((loss, w, norms), ref, steps)
        check(ok, f"{what}: {text}")
        if ref_val is not None:
            check(len(val) == len(ref_val) and all(abs(a - b) / abs(b) < 1e-5 for a, b in zip(val, ref_val)),
                  f"{what}: validation {val} against one rank's {ref_val}")


def check_export_refused(check, export_hf, weights, out, want):
    """export_hf of `weights` must stop with one line holding `want` and write nothing at `out`."""
    p = subprocess.run([export_hf, weights, out], capture_output=True, text=True, timeout=60)
    lines = p.stderr.strip().splitlines()
    check(p.returncode != 0 and len(lines) == 1 and want in lines[0] and not os.path.exists(out),
          f"export to Hugging Face: {lines}")


class Checks:
    """The ok/FAIL lines of a test and their tally: check(ok, text) prints one; refused(ranks, sets,
    want, what) checks a run that must stop with one error line holding `want`; finish() exits with
    FAIL if any failed, else prints PASS."""

    def __init__(self, binary, mpiexec, config):
        self.binary, self.mpiexec, self.config, self.failed = binary, mpiexec, config, False

    def __call__(self, ok, text):
        self.failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} {text}")

    def refused(self, ranks, sets, want, what):
        ok, line = one_line_error(self.binary, self.mpiexec, self.config, ranks, sets, want)
        self(ok, f"{what}: {line}")

    def finish(self):
        if self.failed:
            sys.exit("FAIL")
        print("PASS")
