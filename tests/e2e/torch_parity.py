#!/usr/bin/env python3
"""Trellis against PyTorch: one forward+backward of the first micro-batch, same weights, same
tokens; the loss and every parameter's gradient must match the reference in bench/torch_gpt.py.
Then the training loop's own first step on that micro-batch (a global batch of one micro-batch):
the loss and gradient norm its metrics record must be the reference's too, so the step's scaling
(the mean over the targets kept, the routers' losses) is checked apart from the dump's.

usage: torch_parity.py TRAIN_GPT_BINARY CONFIG_TOML [--device cpu|cuda] [--keep] [--set K=V ...]
Exit 0 when everything matches, 1 when not, 77 (skipped) when torch is not installed."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("SKIP: torch not installed")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from torch_gpt import load_trellis_dump  # noqa: E402

LOSS_TOL = 1e-5  # |loss_t - loss_ref| / |loss_ref|
GRAD_TOL = 1e-4  # ||g_t - g_ref|| / max(||g_ref||, 1e-12), per parameter tensor


def run_trellis(binary, config, device, sets, args, what):
    """train_gpt CONFIG in fp32 without dropout on `device`, with `sets` and `args`; False (and its
    output) if it fails."""
    sets = ["train.precision=fp32", f"train.device={device}", "model.dropout=0"] + sets
    cmd = [binary, config] + args + [x for kv in sets for x in ("--set", kv)]
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout[-4000:], p.stderr[-4000:], sep="\n")
        print(f"FAIL: {what} exited with {p.returncode}")
    return p.returncode == 0


def run_dump(binary, config, dump_dir, device, extra):
    return run_trellis(binary, config, device, extra, ["--dump-grads", dump_dir], os.path.basename(binary))


def run_step(binary, config, tmp, device, extra, batch):
    """The loss and gradient norm of training step 1 (one micro-batch of `batch` samples), from the
    metrics file; None if the run fails."""
    metrics = os.path.join(tmp, "metrics.jsonl")
    sets = extra + ["train.steps=1", f"train.global_batch={batch}", "log.val_every=0", "checkpoint.dir=",
                    "log.metrics_file=" + metrics]
    if not run_trellis(binary, config, device, sets, [], "the training step"):
        return None
    with open(metrics) as f:
        steps = [r for r in map(json.loads, f) if r.get("step") == 1 and "grad_norm" in r]
    return (steps[0]["loss"], steps[0]["grad_norm"]) if len(steps) == 1 else None


def targets_masked(tokens, targets, eod):
    """data.eod_mask_loss: the dump's targets are -1 exactly where the input is the EOD token, and
    elsewhere the next input (the samples are windows of one stream)."""
    at_eod = tokens == eod
    ok = bool(at_eod.any()) and torch.equal(targets < 0, at_eod) and \
        torch.equal(targets[:, :-1][~at_eod[:, :-1]], tokens[:, 1:][~at_eod[:, :-1]])
    print(f"targets: {int(at_eod.sum())} of {targets.numel()} left out after token {eod} "
          f"{'ok' if ok else 'FAIL (expected -1 exactly after each, the next token elsewhere)'}")
    return ok


def compare(dump_dir, step, eod=None, reset_positions=False, eod_mask_loss=None):
    """The dump against the reference; `step(batch)` runs the training loop's first step."""
    try:
        model, info = load_trellis_dump(dump_dir, dtype=torch.float64)
    except (OSError, ValueError, KeyError) as e:
        print(f"FAIL: cannot load the dump in {dump_dir}: {type(e).__name__}: {e}")
        return False
    meta = info["meta"]
    if float(meta["config"].get("dropout", 0.0)) != 0.0:
        print(f"FAIL: the dump was made with dropout {meta['config']['dropout']}; parity needs 0")
        return False
    if info["grads"] is None or info["loss"] is None:
        print("FAIL: the dump has no grads.f32 or no loss")
        return False
    if eod_mask_loss is not None and not targets_masked(info["tokens"], info["targets"], eod_mask_loss):
        return False
    model.eval()  # dropout is 0 anyway; eval makes sure
    _, loss = model(info["tokens"], info["targets"], eod=eod, reset_positions=reset_positions)
    loss.backward()
    loss_ref, loss_t = model.lm_loss.item(), float(info["loss"])  # the objective adds the balancing losses
    loss_rel = abs(loss_t - loss_ref) / abs(loss_ref)

    rows = []
    for name, p in model.named_parameters():
        g_ref, g_t = p.grad, info["grads"][name]
        ref_norm = g_ref.norm().item()
        rel = (g_t - g_ref).norm().item() / max(ref_norm, 1e-12)
        rows.append((rel, info["trellis_names"][name], ref_norm, g_t.norm().item()))
    rows.sort(reverse=True)

    c = meta["config"]
    print(f"model: V={c['vocab_size']} T={c['seq_len']} L={c['n_layers']} H={c['n_heads']} "
          f"C={c['d_model']}; batch B={meta['batch']['B']} T={meta['batch']['T']}")
    print(f"loss: trellis {loss_t:.8f}  torch(f64) {loss_ref:.8f}  rel err {loss_rel:.2e} "
          f"(tol {LOSS_TOL:.0e}) {'ok' if loss_rel <= LOSS_TOL else 'FAIL'}")
    print(f"\n{'parameter':28s} {'rel err':>10s} {'|g_ref|':>12s} {'|g_trellis|':>12s}")
    bad = [r for r in rows if not r[0] <= GRAD_TOL]  # `not <=` also catches NaN
    for rel, name, rn, tn in rows[:max(10, len(bad))]:
        flag = "" if rel <= GRAD_TOL else "  FAIL"
        print(f"{name:28s} {rel:10.2e} {rn:12.5e} {tn:12.5e}{flag}")
    print(f"\n{len(rows)} gradient tensors, worst rel err {rows[0][0]:.2e} (tol {GRAD_TOL:.0e}), "
          f"{len(bad)} over tolerance")
    norm_ref = sum(p.grad.double().pow(2).sum().item() for p in model.parameters()) ** 0.5
    got = step(meta["batch"]["B"])
    step_ok = got is not None and abs(got[0] - loss_ref) <= LOSS_TOL * abs(loss_ref) and \
        abs(got[1] - norm_ref) <= GRAD_TOL * norm_ref
    print(f"training step 1: loss {got[0] if got else None}, gradient norm {got[1] if got else None} against "
          f"torch(f64) {loss_ref:.8f}, {norm_ref:.8f} {'ok' if step_ok else 'FAIL'}")
    return loss_rel <= LOSS_TOL and not bad and step_ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary")
    ap.add_argument("config")
    ap.add_argument("--device", default="cpu", help="train.device for the Trellis run")
    ap.add_argument("--keep", action="store_true", help="keep the dump directory")
    ap.add_argument("--set", dest="sets", action="append", default=[],
                    help="extra section.key=value overrides for the Trellis run")
    args = ap.parse_args()
    dump_dir = tempfile.mkdtemp(prefix="trellis_parity_")
    try:
        ok = run_dump(args.binary, args.config, dump_dir, args.device, args.sets)
        sets = dict(s.split("=", 1) for s in args.sets)
        # Document masking is the run's, not the model's: the dump does not say it.
        eod = int(sets["data.eod_token"]) if sets.get("data.document_mask") == "true" else None
        eod_mask_loss = int(sets["data.eod_token"]) if sets.get("data.eod_mask_loss") == "true" else None
        step = lambda batch: run_step(args.binary, args.config, dump_dir, args.device, args.sets, batch)
        ok = ok and compare(dump_dir, step, eod, sets.get("data.reset_positions") == "true", eod_mask_loss)
    finally:
        if args.keep:
            print("dump kept in", dump_dir)
        else:
            shutil.rmtree(dump_dir, ignore_errors=True)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
