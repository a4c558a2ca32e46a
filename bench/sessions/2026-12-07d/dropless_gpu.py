#!/usr/bin/env python3
"""Dropless routing (moe.dropless) on one GPU, gpu_e2e's checks for it alone: fp32 against the CPU
(GPT-2's experts, and Mixtral's width-90 experts under Qwen2-MoE's gated shared MLP), bf16 launched
kernel by kernel (no graphs, the log says) bitwise the same run twice, and N + resume + N = 2N.
Usage (from tests/e2e): dropless_gpu.py TRAIN_GPT CONFIG"""
import sys
import tempfile

sys.path.insert(0, ".")
from gpu_e2e import STEPS, check, check_resume, check_same_model, train, train_with_log  # noqa: E402

binary, config = sys.argv[1:3]
f32 = "train.precision=fp32"
moe = ["moe.experts=4", "moe.top_k=2", "moe.aux_loss_coef=0.05", "moe.z_loss_coef=0.05", "moe.shared_experts=1",
       "moe.dropless=true"]
q2m = moe + ["model.mlp=swiglu", "model.bias=false", "moe.ffn_hidden_size=90", "moe.shared_gate=true",
             "model.qkv_bias=true", "moe.renormalize=false"]
with tempfile.TemporaryDirectory() as tmp:
    for tag, name, sets in (("dl", "dropless experts", moe), ("dlq2m", "dropless, Qwen2-MoE's, width 90", q2m)):
        on_cpu = train(binary, "", config, tmp, f"{tag}_cpu", 1, "train.device=cpu", f32, *sets)
        on_gpu = train(binary, "", config, tmp, f"{tag}_gpu", 1, "train.device=cuda", f32, *sets)
        check_same_model(f"{name}: one GPU against the CPU, fp32", on_gpu, on_cpu)
        bf = ["train.device=cuda", "train.precision=bf16", "model.dropout=0", *sets]
        first, out = train_with_log(binary, config, tmp, f"{tag}_bf1", *bf)
        again = train(binary, "", config, tmp, f"{tag}_bf2", 1, *bf, "train.cuda_graphs=false")
        check("cuda graphs: none (moe.dropless" in out and first == again,
              f"{name}, bf16: no graphs, bitwise the same run twice ({STEPS} steps)")
    check_resume(binary, "", config, tmp, "dl_bf16_resume", 1, "train.device=cuda", "train.precision=bf16",
                 "model.dropout=0", *moe)
print("PASS")
