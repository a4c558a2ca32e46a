#!/usr/bin/env python3
"""End-to-end checks on the GPU, for a machine with one or more (CI has none: exit 77, skipped,
with the reason). The tiny config, dropout on, deterministic mode:
- one GPU in fp32 trains the same model as the CPU reference (losses and final weights);
- one GPU in bf16: N + resume + N steps equal 2N steps bitwise (split master weights);
- one GPU without dropout: steps replayed as CUDA graphs equal steps launched kernel by kernel
  (bf16 and fp16 bitwise in deterministic mode, bf16 with cuDNN attention within rounding), and
  N + resume + N equals 2N with them;
- one GPU with mixture-of-experts blocks (4 experts, top 2, capacity factor 1: choices dropped) in
  fp32 trains the same model as the CPU; in bf16 its steps replayed as CUDA graphs equal launched
  ones bitwise, and N + resume + N equals 2N; so with Mixtral's experts (SwiGLU without biases, of
  width 90: model.mlp = swiglu, model.bias = false, moe.ffn_hidden_size = 90) in fp32 and bf16, and with
  Qwen2-MoE's shared MLP gated per token (moe.shared_gate, qkv biases, gates not renormalized);
  dropless (moe.dropless: the experts' GEMMs sized on the host, no graphs) in fp32 against the CPU,
  with GPT-2's experts and with Qwen2-MoE's, and in bf16 bitwise the same run twice;
- one GPU with rotary positions (model.position_embedding = rope) in fp32 trains the same model as
  the CPU; in bf16 with cuDNN attention its graphed steps match launched ones;
- one GPU with SwiGLU MLPs (model.mlp = swiglu) in fp32 trains the same model as the CPU; in bf16
  with cuDNN attention its graphed steps match launched ones; so with an MLP width of 90
  (model.ffn_hidden_size), GELU and in Llama's block (RMSNorm, rotary positions with Llama 3's
  scaling: model.rope_scaling = llama3, SwiGLU, the head
  untied: model.tie_embeddings = false, 2 key-value heads of 4: model.n_kv_heads = 2, no linear
  biases: model.bias = false, norm eps 1e-6), and in Qwen3's (QK-norm: model.qk_norm = true, heads of
  128 at d_model 64: model.head_dim = 128, through the fused attention);
- one GPU with the optimizer offloaded (zero.offload = cpu: AdamW on the host) trains the same model
  as without, in fp32, bf16 and fp16 (the host's AdamW rounds like the device's up to fused
  multiply-adds), also with the state in files (zero.offload = nvme, fp32), and so do two GPUs at
  data = 2, ZeRO stage 1, bf16;
with two GPUs or more, under mpiexec:
- data = 2 (ZeRO stages 0 and 1), tensor = 2 and pipeline = 2 (1F1B) in fp32 train the same model
  as one GPU; so does expert parallelism (parallel.expert = 2: the routed slots exchanged all-to-all
  through NCCL) with the experts' model;
- data = 2, ZeRO stage 1, bf16: N + resume + N equals 2N bitwise (per-rank optimizer state).
Usage: gpu_e2e.py TRAIN_GPT MPIEXEC CONFIG"""
import json
import os
import struct
import subprocess
import sys
import tempfile

from equivalence import LOSS_TOL, WEIGHT_L2_TOL, WEIGHT_MAX_TOL, compare

STEPS = 12
# The CPU layout tests' tolerances (fp32 rounding grown over 12 Adam steps; see
# layout_equivalence.py): the GPU and the CPU sum in different orders (cuBLAS against OpenBLAS, own
# kernels against OpenMP loops), and so do the layouts on the GPU against one GPU. On two H200s the
# differences were 10-100 times below them (docs/benchmarks.md, fourteenth session); a layout or
# kernel bug moves losses by 1e-3 or more.
BASE = ["model.dropout=0.1", f"train.steps={STEPS}", "train.micro_batch=4", "train.global_batch=8",
        "train.deterministic=true", "log.val_every=0"]
ENV_VARS = ("NCCL_NVLS_ENABLE", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES")


def command(binary, mpiexec, config, ranks, sets):
    if ranks == 1:
        cmd = [binary, config]
    else:
        cmd = [mpiexec, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(ranks),
               "-x", "OMP_NUM_THREADS=1"]
        for var in ENV_VARS:
            if var in os.environ:
                cmd += ["-x", var]
        cmd += [binary, config]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def run(binary, mpiexec, config, tmp, tag, ranks, sets, export):
    """A run that must succeed: ((losses by step, exported weights or None), its standard output)."""
    metrics = os.path.join(tmp, tag + ".jsonl")
    weights = os.path.join(tmp, tag + "_weights")
    cmd = command(binary, mpiexec, config, ranks, [*BASE, "log.metrics_file=" + metrics, *sets])
    if export:
        cmd += ["--export-weights", weights]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    losses = {r["step"]: r["loss"] for r in map(json.loads, open(metrics)) if "step" in r and r.get("split") != "val"}
    w = None
    if export:
        raw = open(os.path.join(weights, "params.f32"), "rb").read()
        w = struct.unpack(f"<{len(raw) // 4}f", raw)
    return (losses, w), p.stdout


def train(binary, mpiexec, config, tmp, tag, ranks, *sets, export=True):
    """A run that must succeed: (losses by step, exported weights or None)."""
    return run(binary, mpiexec, config, tmp, tag, ranks, sets, export)[0]


def train_with_log(binary, config, tmp, tag, *sets):
    """A one-rank run that must succeed: ((losses, weights), its standard output)."""
    return run(binary, "", config, tmp, tag, 1, sets, True)


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)
    print("ok:", what)


def check_same_model(name, run, ref, tols=(LOSS_TOL, WEIGHT_L2_TOL, WEIGHT_MAX_TOL)):
    loss, w = run
    ref_loss, ref_w = ref
    steps = sorted(ref_loss)
    dl, dw, l2 = compare([loss[s] for s in steps], [ref_loss[s] for s in steps], w, ref_w)
    loss_tol, l2_tol, max_tol = tols
    check(sorted(loss) == steps and dl < loss_tol and l2 < l2_tol and dw < max_tol,
          f"{name}: loss rel diff {dl:.1e} (< {loss_tol:.0e}), weights rel L2 {l2:.1e} (< {l2_tol:.0e}), "
          f"max {dw:.1e} (< {max_tol:.0e})")


def check_resume(binary, mpiexec, config, tmp, tag, ranks, *sets):
    """2N steps against N + resume + N, bitwise."""
    ck = os.path.join(tmp, tag + "_ck")
    full, _ = train(binary, mpiexec, config, tmp, tag + "_full", ranks, *sets, export=False)
    train(binary, mpiexec, config, tmp, tag + "_a", ranks, *sets, "checkpoint.dir=" + ck, "checkpoint.every=6",
          "train.stop_after=6", export=False)
    second, _ = train(binary, mpiexec, config, tmp, tag + "_b", ranks, *sets, "checkpoint.dir=" + ck, export=False)
    check(sorted(second) == list(range(7, STEPS + 1)) and all(second[s] == full[s] for s in second),
          f"{tag}: steps 7..{STEPS} after resume equal the uninterrupted run bitwise")


def gpu_count():
    """GPUs this process may use: CUDA_VISIBLE_DEVICES if set, else nvidia-smi's list."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip()])
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
        return sum(1 for line in out.splitlines() if line.startswith("GPU "))
    except (OSError, subprocess.SubprocessError):
        return 0


def main():
    binary, mpiexec, config = sys.argv[1:4]
    probe = subprocess.run([binary, config, "--set", "train.device=cuda", "--set", "train.steps=1",
                            "--set", "log.val_every=0"], capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        reason = (probe.stderr.strip().splitlines() or ["train_gpt failed"])[-1]
        if "no CUDA device" in reason:
            print("SKIP: " + reason)
            sys.exit(77)
        sys.exit(f"FAIL: one step on the GPU: {reason}")
    gpus = gpu_count()
    print(f"{gpus} GPU(s) visible")
    with tempfile.TemporaryDirectory() as tmp:
        f32 = "train.precision=fp32"
        cpu = train(binary, mpiexec, config, tmp, "cpu", 1, "train.device=cpu", f32)
        one = train(binary, mpiexec, config, tmp, "gpu1", 1, "train.device=cuda", f32)
        check_same_model("one GPU against the CPU, fp32", one, cpu)
        check_resume(binary, mpiexec, config, tmp, "gpu1_bf16", 1, "train.device=cuda", "train.precision=bf16")
        off = train(binary, mpiexec, config, tmp, "gpu1_offload", 1, "train.device=cuda", f32, "zero.offload=cpu")
        check_same_model("one GPU, optimizer offloaded to the host, against on the GPU, fp32", off, one)
        files = os.path.join(tmp, "offload_files")
        os.mkdir(files)
        nvme = train(binary, mpiexec, config, tmp, "gpu1_nvme", 1, "train.device=cuda", f32, "zero.offload=nvme",
                     "zero.offload_dir=" + files)
        check(nvme == off, "one GPU, optimizer offloaded to files (nvme): bitwise the run offloaded to host memory")
        check(not os.listdir(files), "zero.offload_dir is left empty")
        bf = ["train.device=cuda", "train.precision=bf16"]
        on16 = train(binary, mpiexec, config, tmp, "gpu1_bf16_dev", 1, *bf)
        off16 = train(binary, mpiexec, config, tmp, "gpu1_bf16_offload", 1, *bf, "zero.offload=cpu")
        # A master that differs in its last bit (the device fuses multiply-adds, the host does not)
        # can round its 16-bit parameter the other way, and such flips grow over the steps: on an
        # H200 loss 2.9e-5, weights rel L2 7.9e-4, max 3.6e-3 in bf16 (docs/benchmarks.md,
        # fifteenth session). The L2 bound is what catches a lost or stale update.
        half = (1e-3, 4e-3, 1e-2)
        check_same_model("one GPU, optimizer offloaded to the host, against on the GPU, bf16", off16, on16, half)
        fp16 = ["train.device=cuda", "train.precision=fp16"]
        on_f16 = train(binary, mpiexec, config, tmp, "gpu1_fp16_dev", 1, *fp16)
        off_f16 = train(binary, mpiexec, config, tmp, "gpu1_fp16_offload", 1, *fp16, "zero.offload=cpu")
        check_same_model("one GPU, optimizer offloaded to the host, against on the GPU, fp16", off_f16, on_f16, half)
        # CUDA graphs (train.cuda_graphs, on by default where they apply: no dropout): the replayed
        # steps compute what the launched ones do, bitwise in deterministic mode, over two
        # micro-batches a step (the loader's step slots); fp16 captures again when its scale moves.
        for prec in ("bf16", "fp16"):
            sets = ["train.device=cuda", "train.precision=" + prec, "model.dropout=0"]
            graphed, out = train_with_log(binary, config, tmp, "graphs_" + prec, *sets)
            check(f"cuda graphs: {STEPS - 1} of {STEPS} steps" in out,
                  f"{prec}: every step after the first launched from a graph ({out.strip().splitlines()[-1]})")
            plain = train(binary, mpiexec, config, tmp, "plain_" + prec, 1, *sets, "train.cuda_graphs=false")
            check(graphed == plain, f"{prec}: steps replayed as CUDA graphs equal launched ones bitwise (losses, weights)")
        # The loss scale doubling every 3 steps: each change runs a plain step, then captures again.
        moving = ["train.device=cuda", "train.precision=fp16", "model.dropout=0", "fp16.loss_scale_window=3"]
        graphed, out = train_with_log(binary, config, tmp, "graphs_fp16_moving", *moving)
        check("cuda graphs:" in out and f"{STEPS - 1} of" not in out,
              f"fp16, scale moving: some steps captured again ({[l for l in out.splitlines() if 'cuda graphs' in l]})")
        plain = train(binary, mpiexec, config, tmp, "plain_fp16_moving", 1, *moving, "train.cuda_graphs=false")
        check(graphed == plain, "fp16, scale moving: graphs equal launched steps bitwise")
        check_resume(binary, mpiexec, config, tmp, "graphs_bf16_resume", 1, "train.device=cuda", "train.precision=bf16",
                     "model.dropout=0")
        fast = ["train.device=cuda", "train.precision=bf16", "model.dropout=0", "train.deterministic=false"]
        graphed, _ = train_with_log(binary, config, tmp, "graphs_cudnn", *fast)
        plain = train(binary, mpiexec, config, tmp, "plain_cudnn", 1, *fast, "train.cuda_graphs=false")
        check_same_model("CUDA graphs with cuDNN attention against without, bf16", graphed, plain, half)
        moe = ["moe.experts=4", "moe.top_k=2", "moe.capacity_factor=1.0", "moe.aux_loss_coef=0.05", "moe.z_loss_coef=0.05",
               "moe.shared_experts=1"]
        # Mixtral's experts at a width of 90: the batched fc GEMM without epilogue into [gate | up]
        # rows no multiple of 16 bytes in bf16, SwiGLU over every local expert's slots.
        mx = moe + ["model.mlp=swiglu", "model.bias=false", "moe.ffn_hidden_size=90"]
        # Qwen2-MoE's: the shared MLP gated per token (sigmoid_gate_rows over 90 columns: the scalar path),
        # qkv biases, gates not renormalized.
        q2m = mx + ["moe.shared_gate=true", "model.qkv_bias=true", "moe.renormalize=false"]
        # Dropless (GELU experts with biases, and Qwen2-MoE's): the GEMMs sized by the routing's counts
        # read back to the host, so no graphs; a bf16 run is bitwise the same run again.
        dl = moe + ["moe.dropless=true"]
        one_gpu = {}
        for tag, name, sets in (("moe", "experts", moe), ("mx", "Mixtral's experts, width 90", mx),
                                ("q2m", "Qwen2-MoE's gated shared MLP, width 90", q2m),
                                ("dl", "dropless experts", dl),
                                ("dlq2m", "dropless, Qwen2-MoE's gated shared MLP", q2m + ["moe.dropless=true"])):
            on_cpu = train(binary, mpiexec, config, tmp, f"{tag}_cpu", 1, "train.device=cpu", f32, *sets)
            one_gpu[tag] = train(binary, mpiexec, config, tmp, f"{tag}_gpu1", 1, "train.device=cuda", f32, *sets)
            check_same_model(f"{name}: one GPU against the CPU, fp32", one_gpu[tag], on_cpu)
            bf = ["train.device=cuda", "train.precision=bf16", "model.dropout=0", *sets]
            graphed, out = train_with_log(binary, config, tmp, f"{tag}_graphs", *bf)
            plain = train(binary, mpiexec, config, tmp, f"{tag}_plain", 1, *bf, "train.cuda_graphs=false")
            if "moe.dropless=true" in sets:
                check("cuda graphs: none (moe.dropless" in out and graphed == plain,
                      f"{name}, bf16: launched kernel by kernel (no graphs), bitwise the same run twice")
            else:
                check(f"cuda graphs: {STEPS - 1} of {STEPS} steps" in out and graphed == plain,
                      f"{name}, bf16: steps replayed as CUDA graphs equal launched ones bitwise")
        check_resume(binary, mpiexec, config, tmp, "moe_bf16_resume", 1, "train.device=cuda", "train.precision=bf16",
                     "model.dropout=0", *moe)
        # Rotary positions: one GPU against the CPU in fp32; in bf16 with cuDNN attention, graphs equal
        # launched steps.
        rope = ["model.position_embedding=rope", "model.rope_theta=500"]
        rope_cpu = train(binary, mpiexec, config, tmp, "rope_cpu", 1, "train.device=cpu", f32, *rope)
        rope_one = train(binary, mpiexec, config, tmp, "rope_gpu1", 1, "train.device=cuda", f32, *rope)
        check_same_model("rotary positions: one GPU against the CPU, fp32", rope_one, rope_cpu)
        rope_bf = fast + rope
        graphed, out = train_with_log(binary, config, tmp, "rope_graphs", *rope_bf)
        plain = train(binary, mpiexec, config, tmp, "rope_plain", 1, *rope_bf, "train.cuda_graphs=false")
        check_same_model("rotary positions, bf16, cuDNN attention: CUDA graphs against without", graphed, plain, half)
        swiglu = ["model.mlp=swiglu"]
        swiglu_cpu = train(binary, mpiexec, config, tmp, "swiglu_cpu", 1, "train.device=cpu", f32, *swiglu)
        swiglu_one = train(binary, mpiexec, config, tmp, "swiglu_gpu1", 1, "train.device=cuda", f32, *swiglu)
        check_same_model("SwiGLU: one GPU against the CPU, fp32", swiglu_one, swiglu_cpu)
        graphed, out = train_with_log(binary, config, tmp, "swiglu_graphs", *fast, *swiglu)
        plain = train(binary, mpiexec, config, tmp, "swiglu_plain", 1, *fast, *swiglu, "train.cuda_graphs=false")
        check_same_model("SwiGLU, bf16, cuDNN attention: CUDA graphs against without", graphed, plain, half)
        # An MLP width F = 90 (model.ffn_hidden_size): rows no multiple of the kernels' vectors, leading
        # dimensions no multiple of 16 bytes in bf16. GELU, and Llama's block (RMSNorm, rotary
        # positions, SwiGLU, an untied head, grouped-query attention, no linear biases).
        for name, sets in (("GELU", ["model.mlp=gelu"]),
                           ("RMSNorm, rope with Llama 3's scaling, SwiGLU, untied head, 2 key-value heads, no linear biases",
                            ["model.mlp=swiglu", "model.norm=rmsnorm", "model.position_embedding=rope",
                             "model.rope_theta=500", "model.rope_scaling=llama3", "model.rope_original_positions=64",
                             "model.tie_embeddings=false", "model.n_kv_heads=2", "model.bias=false",
                             "model.norm_eps=1e-6"]),
                           ("QK-norm, heads of 128 (q 512 wide at d_model 64), rope, SwiGLU, 2 key-value heads, no linear biases",
                            ["model.mlp=swiglu", "model.norm=rmsnorm", "model.position_embedding=rope",
                             "model.rope_theta=500", "model.qk_norm=true", "model.head_dim=128", "model.n_kv_heads=2",
                             "model.bias=false"])):
            tag, odd = name.split(",")[0].lower(), ["model.ffn_hidden_size=90", *sets]
            odd_cpu = train(binary, mpiexec, config, tmp, f"odd_{tag}_cpu", 1, "train.device=cpu", f32, *odd)
            odd_one = train(binary, mpiexec, config, tmp, f"odd_{tag}_gpu1", 1, "train.device=cuda", f32, *odd)
            check_same_model(f"{name}, MLP width 90: one GPU against the CPU, fp32", odd_one, odd_cpu)
            graphed, out = train_with_log(binary, config, tmp, f"odd_{tag}_graphs", *fast, *odd)
            plain = train(binary, mpiexec, config, tmp, f"odd_{tag}_plain", 1, *fast, *odd, "train.cuda_graphs=false")
            check_same_model(f"{name}, MLP width 90, bf16: CUDA graphs against without", graphed, plain, half)
        if gpus < 2:
            print("one GPU: the two-GPU layouts are not checked")
            return
        for tag, name, sets in (("data2", "data = 2", []),
                                ("data2_zero1", "data = 2, ZeRO stage 1", ["zero.stage=1"]),
                                ("tensor2", "tensor = 2", ["parallel.tensor=2"]),
                                ("pipeline2", "pipeline = 2, 1F1B", ["parallel.pipeline=2", "parallel.schedule=1f1b"])):
            run = train(binary, mpiexec, config, tmp, tag, 2, "train.device=cuda", f32, *sets)
            check_same_model(f"{name} against one GPU, fp32", run, one)
        run = train(binary, mpiexec, config, tmp, "moe_expert2", 2, "train.device=cuda", f32, *moe, "parallel.expert=2")
        check_same_model("experts, data = 2 with expert = 2 against one GPU, fp32", run, one_gpu["moe"])
        run = train(binary, mpiexec, config, tmp, "mx_expert2", 2, "train.device=cuda", f32, *mx, "parallel.expert=2")
        check_same_model("Mixtral's experts, data = 2 with expert = 2 against one GPU, fp32", run, one_gpu["mx"])
        check_resume(binary, mpiexec, config, tmp, "data2_zero1_bf16", 2, "train.device=cuda", "train.precision=bf16",
                     "zero.stage=1")
        z1 = ["train.device=cuda", "train.precision=bf16", "zero.stage=1"]
        on_z1 = train(binary, mpiexec, config, tmp, "data2_zero1_bf16_dev", 2, *z1)
        off_z1 = train(binary, mpiexec, config, tmp, "data2_zero1_bf16_offload", 2, *z1, "zero.offload=cpu")
        check_same_model("data = 2, ZeRO stage 1, optimizer offloaded against on the GPUs, bf16", off_z1, on_z1, half)


if __name__ == "__main__":
    main()
