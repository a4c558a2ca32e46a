#!/usr/bin/env python3
"""The step record's comm_bytes: what rank 0 sent in the step, by process group, counted as the
ring algorithms move it (Communicator::traffic). On the tiny model in fp32 (micro-batch B = 8,
T = 32 tokens, d_model C = 64, 2 blocks, vocabulary padded to 128):
  data = 2: one all-reduce of rank 0's gradients, 2 (n-1)/n = 1 times their bytes;
  pipeline = 2, 4 micro-batches: stage 0 sends each micro-batch's activations, B T C floats, and
    the tied embedding's gradient (128 x C floats) is all-reduced with the last stage;
  tensor = 2: each block's four all-reduces of B T C floats, the embedding's and the head's one
    each, and the vocabulary-parallel loss's few of B T floats;
pipeline = 3: the closing line's most any rank sent is the middle stage's, twice stage 0's;
a one-rank run has no comm_bytes. Then --plan's estimate of each group's bytes (launcher/comm_plan.h)
against the run's, within 3%, on layouts that exercise each of its terms (ZeRO stages 0-3, gather_rows,
16-bit reduction, tensor with sequence parallelism and full recomputation, 1F1B and interleaved
pipelines, 3D, expert parallelism, also with recomputation and dropless (whose estimate assumes
balanced routing, near what a fresh router gives), experts under tensor parallelism). Usage: comm_bytes_test.py TRAIN_GPT MPIEXEC CONFIG"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equivalence  # noqa: E402

B, T, C, L, PADDED_VOCAB = 8, 32, 64, 2, 128
ACTIVATION = B * T * C * 4  # bytes of one micro-batch's (B, T, C) f32 tensor


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)
    print("ok:", what)


def last_step(binary, mpiexec, config, tmp, ranks, tag, sets):
    """(start record, the last step record, stdout) of a 2-step run."""
    metrics = os.path.join(tmp, tag + ".jsonl")
    cmd, p = equivalence.launch(binary, mpiexec, config, ranks,
                                ["train.device=cpu", "train.steps=2", "log.metrics_file=" + metrics, *sets])
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    records = [json.loads(line) for line in open(metrics)]
    steps = [r for r in records if r.get("step") == 2 and r.get("split") != "val"]
    return records[0], steps[-1], p.stdout


def main():
    binary, mpiexec, config = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as tmp:
        _, step, _ = last_step(binary, mpiexec, config, tmp, 1, "one", [])
        check("comm_bytes" not in step, "one rank: no comm_bytes")

        start, step, out = last_step(binary, mpiexec, config, tmp, 2, "data", ["zero.embedding_grad=all_reduce"])
        sent, grads = step.get("comm_bytes", {}), 4 * start["params_per_rank"][0]
        check(list(sent) == ["data"] and 0 <= sent["data"] - grads <= 64,
              f"data = 2: the gradients' bytes {grads} (+ the loss and norm): {sent}")
        check("sent by rank 0 in the last step: data " in out, "the closing line says it")

        start, step, _ = last_step(binary, mpiexec, config, tmp, 2, "pipe", ["parallel.pipeline=2",
                                                                            "train.global_batch=32"])
        sent = step.get("comm_bytes", {})
        check(sorted(sent) == ["embedding", "pipeline"] and 0 <= sent["pipeline"] - 4 * ACTIVATION <= 64,
              f"pipeline = 2: stage 0 sends 4 micro-batches' activations, {4 * ACTIVATION} bytes: {sent}")
        check(sent["embedding"] == PADDED_VOCAB * C * 4, f"... and all-reduces the tied embedding's gradient: {sent}")

        # Pipeline 3: the middle stage sends both ways, twice stage 0's; the closing line gives the
        # most any rank sent, as --plan's busiest stage.
        _, step, out = last_step(binary, mpiexec, config, tmp, 3, "pipe3", ["parallel.pipeline=3", "model.n_layers=4",
                                                                            "train.global_batch=32"])
        most = re.search(r"the most any rank sent in the last step: pipeline ([\d.]+) kB, embedding ([\d.]+) kB", out)
        close = lambda text, want: abs(float(text) * 1e3 - want) <= 1e-3 * want  # printed in kB, 2 decimals
        check(most is not None and close(most.group(1), 8 * ACTIVATION) and close(most.group(2), PADDED_VOCAB * C * 4) and
              abs(step["comm_bytes"]["pipeline"] - 4 * ACTIVATION) <= 64,
              f"pipeline = 3: the middle stage sends 8 activations, stage 0 four ({most and most.group(0)}; "
              f"rank 0 {step['comm_bytes']})")

        _, step, _ = last_step(binary, mpiexec, config, tmp, 2, "tensor", ["parallel.tensor=2"])
        sent, blocks = step.get("comm_bytes", {}), (4 * L + 2) * ACTIVATION
        check(list(sent) == ["tensor"] and 1.0 <= sent["tensor"] / blocks <= 1.02,
              f"tensor = 2: (4 L + 2) all-reduces of B T C floats, {blocks} bytes, and the loss's: {sent}")

        # --plan's estimate of stage 0's traffic against what rank 0 sent, group by group, over
        # layouts that exercise each term (4 blocks; 2 ranks unless said).
        four = ["model.n_layers=4"]
        layouts = [
            (2, []), (4, []), (2, ["zero.reduce_dtype=bf16"]), (2, ["zero.embedding_grad=gather_rows"]),
            (2, ["zero.stage=1"]), (4, ["zero.stage=1"]), (2, ["zero.stage=2", "train.global_batch=32"]),
            (2, ["zero.stage=3"]), (2, ["zero.stage=3", "train.global_batch=32"]), (4, ["zero.stage=3", "train.global_batch=64"]),
            (2, ["parallel.tensor=2"]), (4, ["parallel.tensor=4", "train.global_batch=16"]),
            (2, ["parallel.tensor=2", "parallel.sequence_parallel=true"]),
            (2, ["parallel.tensor=2", "train.checkpointing=full"]),
            (2, ["parallel.tensor=2", "parallel.sequence_parallel=true", "train.checkpointing=full"]),
            (2, ["parallel.pipeline=2", "train.global_batch=32"]),
            (2, ["parallel.pipeline=2", "train.global_batch=32", "parallel.schedule=interleaved",
                 "parallel.virtual_stages=2"]),
            (4, ["parallel.pipeline=2", "parallel.tensor=2", "train.global_batch=32"]),
            (4, ["parallel.pipeline=2", "zero.stage=1", "train.global_batch=32"]),
            (4, ["parallel.pipeline=2", "zero.stage=3", "train.global_batch=32"]),
            (4, ["parallel.tensor=2", "zero.stage=2", "train.global_batch=32"]),
            (2, ["moe.experts=4", "parallel.expert=2"]), (4, ["moe.experts=4", "parallel.expert=2", "zero.stage=1"]),
            (2, ["moe.experts=4", "parallel.expert=2", "train.checkpointing=full"]),
            (2, ["moe.experts=4", "parallel.expert=2", "moe.dropless=true"]),
            (2, ["moe.experts=4", "parallel.tensor=2", "moe.shared_experts=1"]),
            (2, ["moe.experts=4", "parallel.tensor=2", "parallel.sequence_parallel=true"]),
        ]
        for ranks, sets in layouts:
            sets = ["train.device=cpu", *four, *sets]
            _, step, _ = last_step(binary, mpiexec, config, tmp, ranks, "plan", sets)
            q = subprocess.run([binary, config, "--plan", "--world", str(ranks), *sum((["--set", x] for x in sets), [])],
                               capture_output=True, text=True, timeout=60)
            line = re.search(r"^\s+0  (.*)$", q.stdout.split("sent per rank a step")[-1], re.M)
            planned = {g: float(n) * UNITS[u] for g, n, u in re.findall(r"(\w+) ([\d.]+) (kB|MB|GB)", line.group(1))}
            sent = step.get("comm_bytes", {})
            worst = max(abs(planned.get(g, 0) - sent.get(g, 0)) / max(sent.get(g, 0), 1) for g in set(sent) | set(planned))
            check(worst <= 0.03 and all(g in sent for g in planned),
                  f"{ranks} ranks {' '.join(sets[2:])}: --plan {planned} against {sent} (worst {100 * worst:.1f}%)")
    print("PASS")


UNITS = {"kB": 1e3, "MB": 1e6, "GB": 1e9}


if __name__ == "__main__":
    main()
