#!/usr/bin/env python3
"""train_gpt --plan: one row per pipeline stage whose parameters and activation plan are the ones a
run of that layout starts with (its start record's params_per_rank, its "memory per rank" line);
any world size without launching it; a GPU config planned as on GPUs on any machine; a layout that
does not fit the world gives one error line.
Usage: plan_test.py TRAIN_GPT MPIEXEC CONFIG"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import equivalence  # noqa: E402


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)
    print("ok:", what)


def plan(binary, config, *args):
    p = subprocess.run([binary, config, "--set", "train.device=cpu", "--plan", *args], capture_output=True, text=True,
                       timeout=60)
    return p.returncode, p.stdout, p.stderr


def rows(out):
    """{stage: (parameters, activations cell)} from the plan's table."""
    table = {}
    for line in out.splitlines():
        m = re.match(r"\s+(\d+)\s+\S+(?: \+\w+)*\s+([\d,]+)\s+\S+ \S+\s+(?:-|\S+ \S+)\s+(\d+ x \S+ \S+ \+ \S+ \S+)", line)
        if m:
            table[int(m.group(1))] = (int(m.group(2).replace(",", "")), m.group(3))
    return table


def main():
    binary, mpiexec, config = sys.argv[1:4]
    layout = ["parallel.pipeline=2", "zero.stage=1", "train.global_batch=32"]
    sets = sum((["--set", s] for s in layout), [])
    code, out, err = plan(binary, config, "--world", "4", *sets)
    table = rows(out)
    check(code == 0 and sorted(table) == [0, 1] and "plan for 4 ranks: tensor 1 x pipeline 2 x data 2" in out,
          f"--plan --world 4 prints both stages of pipeline 2 x data 2 ({table})")
    with tempfile.TemporaryDirectory() as tmp:
        start, _, _, _, _, _, run_out = equivalence.run(binary, mpiexec, config, tmp, 4, "run",
                                                        ["train.device=cpu", "train.steps=1", *layout])
    # World ranks 0-1 are stage 0, 2-3 stage 1 (rank = tensor + T (data + D pipeline)).
    check(start["params_per_rank"][0] == table[0][0] and start["params_per_rank"][2] == table[1][0],
          f"each stage's parameters are the run's ({start['params_per_rank']})")
    m = re.search(r"memory per rank \(stage 0\):.*activations (\d+ x \S+ \S+) kept \+ (\S+ \S+) workspace", run_out)
    check(m is not None and f"{m.group(1)} + {m.group(2)}" == table[0][1],
          f"stage 0's activation plan is the run's ({table[0][1]})")

    code, out, _ = plan(binary, config, "--world", "512", "--set", "parallel.tensor=2", "--set", "parallel.pipeline=2",
                        "--set", "zero.stage=3", "--set", "train.global_batch=1024")
    check(code == 0 and "plan for 512 ranks: tensor 2 x pipeline 2 x data 128" in out and sorted(rows(out)) == [0, 1],
          "a 512-rank layout is planned on one process")
    code, out, err = plan(binary, config, "--world", "3", "--set", "parallel.tensor=2")
    check(code == 1 and len(err.strip().splitlines()) == 1 and "parallel.tensor" in err,
          f"a layout that does not fit the world: one line ({err.strip()})")
    # A GPU config is planned as on GPUs (bf16) also on a machine without one.
    gpt2 = os.path.join(os.path.dirname(config), "gpt2_124m.toml")
    p = subprocess.run([binary, gpt2, "--plan", "--world", "8"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and ", on GPUs" in p.stdout and "bf16" in p.stdout and sorted(rows(p.stdout)) == [0],
          "a GPU config is planned as on GPUs, in bf16, on any machine")
    # The Llama example (grouped-query attention, no biases, an untied head) plans, its parameters
    # those of its shape.
    llama = os.path.join(os.path.dirname(config), "llama_125m.toml")
    p = subprocess.run([binary, llama, "--plan", "--world", "8"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and "model: 124,668,672 parameters" in p.stdout and sorted(rows(p.stdout)) == [0],
          f"examples/configs/llama_125m.toml plans ({p.stderr.strip()})")
    # So does the Mixtral example: its body plus 8 SwiGLU experts of width 2048 for the dense MLP.
    mixtral = os.path.join(os.path.dirname(config), "mixtral_8x125m.toml")
    p = subprocess.run([binary, mixtral, "--plan", "--world", "8"], capture_output=True, text=True, timeout=60)
    body = 124668672 - 12 * 3 * 2048 * 768  # llama_125m without its dense MLPs
    want = body + 12 * (8 * 768 + 8 * 3 * 2048 * 768)  # the routers and the experts
    check(p.returncode == 0 and f"model: {want:,} parameters" in p.stdout and sorted(rows(p.stdout)) == [0],
          f"examples/configs/mixtral_8x125m.toml plans, {want:,} parameters ({p.stderr.strip()})")
    # And the Qwen3 0.6B example (QK-norm, heads of 128 at d_model 1024): the 0.6B of its name.
    qwen3 = os.path.join(os.path.dirname(config), "qwen3_0.6b_finetune.toml")
    p = subprocess.run([binary, qwen3, "--plan", "--world", "8"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and "model: 596,049,920 parameters" in p.stdout and sorted(rows(p.stdout)) == [0],
          f"examples/configs/qwen3_0.6b_finetune.toml plans, 596,049,920 parameters ({p.stderr.strip()})")
    # And the Qwen1.5-MoE-A2.7B example (60 experts, a gated shared MLP, at expert 4 x ZeRO 3): its 14.3B.
    qwen_moe = os.path.join(os.path.dirname(config), "qwen1.5_moe_a2.7b_finetune.toml")
    p = subprocess.run([binary, qwen_moe, "--plan", "--world", "8"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and "model: 14,315,784,192 parameters" in p.stdout and "expert groups of 4" in p.stdout
          and sorted(rows(p.stdout)) == [0],
          f"examples/configs/qwen1.5_moe_a2.7b_finetune.toml plans, 14,315,784,192 parameters ({p.stderr.strip()})")
    p = subprocess.run([binary, config, "--world", "4"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 1 and "--world goes with --plan" in p.stderr, "--world without --plan is refused")

    # --layouts: every split of 16 ranks at the config's global batch; each row's largest stage is
    # what --plan gives for that layout, and the fit column compares it with --device-memory.
    p = subprocess.run([binary, gpt2, "--layouts", "--world", "16", "--device-memory", "4"], capture_output=True,
                       text=True, timeout=60)
    num = r"(-|[\d.]+ [kMG]B)"
    found = re.findall(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+([\d.]+ \S+) \((\d+)\)\s+" + num + r"\s+" + num +
                       r"\s+" + num + r"\s+(yes|no)", p.stdout, re.M)
    batch = re.search(r"global batch (\d+) sequences", p.stdout)
    check(p.returncode == 0 and len(found) == 11 and batch is not None,
          f"--layouts --world 16 lists the 11 layouts GPT-2 124M allows ({len(found)})")
    check("tensor 8 x pipeline 1: tensor parallelism splits the attention heads" in p.stdout and
          "tensor 1 x pipeline 16: model.n_layers = 12" in p.stdout, "... and says why the others are not possible")
    fits = 0
    for t, pp, d, m, bubble, device, stage, sent_t, sent_d, sent_p, fit in found:
        check((sent_t == "-") == (t == "1") and (sent_d == "-") == (d == "1") and (sent_p == "-") == (pp == "1"),
              f"... it sends over the groups of more than one rank ({sent_t}, {sent_d}, {sent_p})")
        check(int(t) * int(pp) * int(d) == 16 and int(m) * int(d) * 16 == int(batch.group(1)),
              f"tensor {t} x pipeline {pp} x data {d}, {m} micro-batches of 16 make the global batch")
        q = subprocess.run([binary, gpt2, "--plan", "--world", "16", "--device-memory", "4", "--set",
                            f"parallel.tensor={t}", "--set", f"parallel.pipeline={pp}", "--set",
                            f"train.global_batch={batch.group(1)}"], capture_output=True, text=True, timeout=60)
        line = re.search(r"on a device of 4.00 GiB \(--device-memory\), stage (\d+)'s (\S+ \S+) (fits|does NOT fit)",
                         q.stdout)
        check(q.returncode == 0 and line is not None and (line.group(1), line.group(2)) == (stage, device) and
              (line.group(3) == "fits") == (fit == "yes"), f"... its memory is --plan's ({device}, stage {stage}, {fit})")
        expected = "-" if pp == "1" else f"{100.0 * (int(pp) - 1) / int(m):.1f}%"
        check(bubble == expected, f"... its bubble is (p-1)/m ({bubble})")
        fits += fit == "yes"
    check(f"{fits} of 11 layouts fit" in p.stdout and 0 < fits < 11, f"{fits} of 11 fit a 4 GiB device")
    # An interleaved config's sweep keeps the layouts without a pipeline (they run 1f1b, one chunk).
    p = subprocess.run([binary, config, "--layouts", "--world", "4", "--set", "train.device=cpu", "--set",
                        "parallel.pipeline=2", "--set", "parallel.schedule=interleaved", "--set", "parallel.virtual_stages=2",
                        "--set", "model.n_layers=4", "--set", "train.global_batch=32"], capture_output=True, text=True,
                       timeout=60)
    pipeline_one = re.findall(r"^\s+(\d+)\s+1\s+(\d+)\s+\d+\s+-\s", p.stdout, re.M)
    check(p.returncode == 0 and len(pipeline_one) == 3, f"an interleaved config's sweep lists pipeline 1 ({pipeline_one})")
    # 24 sequences are no multiple of micro-batch 16 x any data size of 16 ranks.
    p = subprocess.run([binary, gpt2, "--layouts", "--world", "16", "--set", "train.global_batch=24"],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and "no tensor x pipeline x data layout of 16" in
          p.stderr, "a world no layout fits: the reasons, then one error line")
    print("PASS")


if __name__ == "__main__":
    main()
