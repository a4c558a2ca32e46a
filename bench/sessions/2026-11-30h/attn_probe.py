#!/usr/bin/env python3
"""Session probe (issue 8): how fast is causal attention, forward and backward, at GPT-2 1.3B's shape
(batch 16, 16 heads, sequence 1024, head dim 128, bf16) through each SDPA backend PyTorch offers, with
q, k, v as views of one packed (B, T, 3, H, D) tensor (Trellis's layout) and as contiguous (B, H, T, D)?
Trellis's cuDNN attention took ~16 ms backward and ~5 ms forward per 1.3B step (24 layers)."""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

B, H, T, D = 16, 16, 1024, 128
flops_fwd = 4 * B * H * T * T * D / 2  # causal: half the score matrix


def timed(fn, n=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(n):
        s.record(); fn(); e.record(); torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def inputs(packed):
    if packed:
        qkv = torch.randn(B, T, 3, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        return qkv, q, k, v
    q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    return (q, k, v), q, k, v


print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
    for packed in (True, False):
        try:
            with sdpa_kernel(backend):
                leaf, q, k, v = inputs(packed)
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                dout = torch.randn_like(out)
                fwd = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
                def fb():
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    o.backward(dout)
                both = timed(fb)
            bwd = both - fwd
            print(f"{backend.name:20s} {'packed' if packed else 'BHTD  '}: forward {fwd:.3f} ms "
                  f"({flops_fwd / fwd / 1e9:.0f} TFLOP/s), backward {bwd:.3f} ms ({2.5 * flops_fwd / bwd / 1e9:.0f} TFLOP/s); "
                  f"x24 layers: {24 * fwd:.1f} + {24 * bwd:.1f} ms")
        except Exception as ex:  # a backend that does not take this shape or layout
            print(f"{backend.name:20s} {'packed' if packed else 'BHTD  '}: unavailable ({str(ex).splitlines()[0][:120]})")
