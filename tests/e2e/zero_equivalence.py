#!/usr/bin/env python3
"""ZeRO layout equivalence on the CPU in fp32: a tiny GPT with dropout trained for K steps with
ZeRO stages 0, 1, 2 and 3 at (tensor, pipeline, data) = (1,1,4), (2,1,2), (1,2,2) and (2,2,2) (and
stages 1 and 3 on buckets that need padding; stages 2 and 3 also under sequence parallelism, the
interleaved schedule and full or elementwise activation checkpointing), with gradient accumulation (2 micro-batches per data
rank and step), gives the same losses, gradient norms (clipping active: the norm of the gradient
pieces summed over the data group must be exact) and exported weights as one rank (the reference:
with one data rank every stage is stage 0), up to fp32 reduction-order rounding. The start
record's model_state_bytes_per_rank follows the ZeRO formula, and what rank 0 allocated for model
state shrinks from each stage to the next. Runs at stages 1 and 3 stopped after step 3 and resumed
from their checkpoints continue bitwise; those checkpoints hold each rank's optimizer state
(rank00000..rank00003/adam_m.bin, adam_v.bin) and no whole copy of it, pruning removes them with
their rank directories; in bf16 at stages 1 and 3, each rank's blobs include its f32 master weights (joined
from the split ones) and the resumed run continues bitwise too. A stage-3 checkpoint resumed on other layouts
(one rank, data 4, pipeline 2 x data 2, another ZeRO stage) has its optimizer state resharded and
continues as the uninterrupted one-rank run.
Usage: zero_equivalence.py TRAIN_GPT MPIEXEC CONFIG"""
import json
import os
import sys
import tempfile

import equivalence
from equivalence import LOSS_TOL, NORM_TOL, WEIGHT_L2_TOL, WEIGHT_MAX_TOL

STEPS = 6
BASE = ["train.device=cpu", f"train.steps={STEPS}", "train.micro_batch=1", "train.global_batch=8",
        "model.dropout=0.1", "train.grad_clip=0.5", "log.val_every=0"]


def run(binary, mpiexec, config, tmp, ranks, tag, *sets):
    start, losses, _, w, _, norms, out = equivalence.run(binary, mpiexec, config, tmp, ranks, tag, BASE + list(sets))
    return start, losses, norms, w, out


def rel(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def state_bytes(n, stage, data):
    """fp32 (ZeroOptimizer::model_state_bytes): params 4 (stage 3: over N), grads 4 (stages 2-3:
    over N; stage 1: in full plus the reduced pieces over N), AdamW m and v 8 over N."""
    N = data if stage >= 1 else 1
    params = n * 4 // N if stage >= 3 else n * 4
    grads = n * 4 // N if stage >= 2 else n * 4 + (n * 4 // N if N > 1 else 0)
    return params + grads + n * 8 // N


def main():
    binary, mpiexec, config = sys.argv[1:4]
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        _, ref_loss, ref_norms, ref_w, _ = run(binary, mpiexec, config, tmp, 1, "ref")
        results = {}
        for tp, pp, data in [(1, 1, 4), (2, 1, 2), (1, 2, 2), (2, 2, 2)]:
            for stage in (0, 1, 2, 3):
                ranks = tp * pp * data
                tag = f"t{tp}_p{pp}_d{data}_z{stage}"
                start, loss, norms, w, out = run(binary, mpiexec, config, tmp, ranks, tag, f"parallel.tensor={tp}",
                                                 f"parallel.pipeline={pp}", f"zero.stage={stage}")
                results[tag] = (loss, w, start["model_state_bytes_allocated"])
                dl, dn = rel(loss, ref_loss), rel(norms, ref_norms)
                dw = max(abs(a - b) for a, b in zip(w, ref_w))
                l2 = (sum((a - b) ** 2 for a, b in zip(w, ref_w)) / sum(b * b for b in ref_w)) ** 0.5
                want = [state_bytes(n, stage, data) for n in start["params_per_rank"]]
                ok_bytes = start["model_state_bytes_per_rank"] == want
                if stage >= 1:  # and rank 0 allocates less than at the stage before
                    ok_bytes &= start["model_state_bytes_allocated"] < results[f"t{tp}_p{pp}_d{data}_z{stage - 1}"][2]
                ok = (start["layout"] == {"tensor": tp, "pipeline": pp, "data": data} and start["zero_stage"] == stage
                      and f"ZeRO stage {stage}" in out and ok_bytes and len(loss) == STEPS and len(w) == len(ref_w)
                      and dl <= LOSS_TOL and dn <= NORM_TOL and dw <= WEIGHT_MAX_TOL and l2 <= WEIGHT_L2_TOL)
                failed |= not ok
                print(f"{'ok  ' if ok else 'FAIL'} tensor={tp} pipeline={pp} data={data} zero={stage}: max loss rel "
                      f"diff {dl:.2e}, grad norm {dn:.2e}, weights: rel L2 diff {l2:.2e}, max abs diff {dw:.2e}; "
                      f"model state on rank 0 {start['model_state_bytes_per_rank'][0]} bytes "
                      f"({'as' if ok_bytes else 'NOT as'} the formula: {want[0]}), "
                      f"{start['model_state_bytes_allocated']} allocated + {start['zero_slot_bytes']} in slots")
        # Streaming under sequence parallelism (LayerNorm gradients summed over the tensor group on
        # the pieces), under the interleaved schedule (blocks of two chunks per rank), and with
        # full activation checkpointing (backward recomputes each block's forward from its slot), and
        # elementwise checkpointing under sequence parallelism (the layer norms recomputed on token shards).
        four = ["model.n_layers=4"]  # two chunks of one layer on each of two stages
        _, ref4_loss, ref4_norms, ref4_w, _ = run(binary, mpiexec, config, tmp, 1, "ref4", *four)
        refs = {False: (ref_loss, ref_norms, ref_w), True: (ref4_loss, ref4_norms, ref4_w)}
        for tag, ranks, sets in [
                ("sp_t2_d2_z2", 4, ["parallel.tensor=2", "parallel.sequence_parallel=true", "zero.stage=2"]),
                ("sp_t2_d2_z3", 4, ["parallel.tensor=2", "parallel.sequence_parallel=true", "zero.stage=3"]),
                ("vp_p2_d2_z3", 4, four + ["parallel.pipeline=2", "parallel.schedule=interleaved",
                                           "parallel.virtual_stages=2", "zero.stage=3"]),
                ("ckpt_d2_z3", 2, ["train.checkpointing=full", "zero.stage=3"]),
                ("ew_sp_t2_d2_z3", 4, ["train.checkpointing=elementwise", "parallel.tensor=2",
                                       "parallel.sequence_parallel=true", "zero.stage=3"])]:
            _, loss, norms, w, _ = run(binary, mpiexec, config, tmp, ranks, tag, *sets)
            r_loss, r_norms, r_w = refs[sets[0] == four[0]]
            dl, dn = rel(loss, r_loss), rel(norms, r_norms)
            dw = max(abs(a - b) for a, b in zip(w, r_w))
            ok = len(loss) == STEPS and dl <= LOSS_TOL and dn <= NORM_TOL and dw <= WEIGHT_MAX_TOL
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} {' '.join(sets)}: max loss rel diff {dl:.2e}, grad norm {dn:.2e}, "
                  f"weights max abs diff {dw:.2e}")
        # Buckets that do not divide by the data size: 63,822 parameters over 4 ranks (each bucket padded).
        odd = ["model.d_model=66", "model.n_heads=3", "model.n_layers=1"]
        _, odd_loss, odd_norms, odd_w, _ = run(binary, mpiexec, config, tmp, 1, "odd_ref", *odd)
        for stage in (1, 3):
            start, loss, norms, w, _ = run(binary, mpiexec, config, tmp, 4, f"odd_d4_z{stage}", *odd, f"zero.stage={stage}")
            n = start["params_per_rank"][0]
            dl, dn = rel(loss, odd_loss), rel(norms, odd_norms)
            dw = max(abs(a - b) for a, b in zip(w, odd_w))
            ok = (n % 4 != 0 and start["model_state_bytes_per_rank"] == [state_bytes(n, stage, 4)] * 4
                  and len(w) == len(odd_w) and dl <= LOSS_TOL and dn <= NORM_TOL and dw <= WEIGHT_MAX_TOL)
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} data=4 zero={stage} with {n} parameters (buckets padded to multiples "
                  f"of 4 x 64): max loss rel diff {dl:.2e}, grad norm {dn:.2e}, weights max abs diff {dw:.2e}")
        # Resume under stages 1 and 3: stop after step 3, resume with the same layout, bitwise. Each
        # rank saved its own optimizer state; keep = 1 on resuming prunes step 3 with its rank dirs.
        for stage in (1, 3):
            ck = os.path.join(tmp, f"ck{stage}")
            z = ["parallel.tensor=2", f"zero.stage={stage}", "checkpoint.dir=" + ck]
            whole_loss, whole_w, _ = results[f"t2_p1_d2_z{stage}"]
            run(binary, mpiexec, config, tmp, 4, f"ck{stage}_first", *z, "train.stop_after=3")
            step3 = os.path.join(ck, "step_00000003")
            manifest = json.load(open(os.path.join(step3, "manifest.json")))
            names = {b["name"] for b in manifest["blobs"]}
            per_rank = {f"rank{r:05d}/{t}.bin" for r in range(4) for t in ("adam_m", "adam_v")}
            layout = {"tensor": 2, "pipeline": 1, "data": 2, "virtual_stages": 1, "zero_stage": stage, "world": 4,
                      "stage_layers": "2"}  # the tiny config's 2 blocks, one stage
            saved_ok = (names == per_rank | {"params"} and all(os.path.isfile(os.path.join(step3, n)) for n in per_rank)
                        and manifest["meta"]["optimizer_state"] == "per_rank"
                        and manifest["meta"]["written_by_layout"] == layout)
            _, resumed, _, resumed_w, _ = run(binary, mpiexec, config, tmp, 4, f"ck{stage}_resume", *z,
                                              "checkpoint.keep=1")
            pruned = os.listdir(ck) == ["step_00000006"]
            ok = saved_ok and pruned and resumed == whole_loss[3:] and resumed_w == whole_w
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} tensor=2 data=2 zero={stage} checkpoint after step 3: "
                  f"{'rank00000..rank00003 optimizer blobs, no whole adam_m' if saved_ok else f'blobs {sorted(names)}'}; "
                  f"resumed on the same layout: {'bitwise equal to' if ok else 'differs from'} the uninterrupted run; "
                  f"keep = 1 left {sorted(os.listdir(ck))}")
        # bf16 at stages 1 and 3: each rank's master blob is its split master weights joined as f32
        # (its bucket pieces, padding included); resumed, the run continues bitwise.
        for stage in (1, 3):
            z = ["parallel.tensor=2", f"zero.stage={stage}", "train.precision=bf16"]
            _, whole16, _, whole16_w, _ = run(binary, mpiexec, config, tmp, 4, f"bf16_whole_z{stage}", *z)
            ck = os.path.join(tmp, f"ck_bf16_z{stage}")
            run(binary, mpiexec, config, tmp, 4, f"bf16_first_z{stage}", *z, "checkpoint.dir=" + ck, "train.stop_after=3")
            blobs = json.load(open(os.path.join(ck, "step_00000003", "manifest.json")))["blobs"]
            masters = [b for b in blobs if b["name"].endswith("/master.bin")]
            _, resumed16, _, resumed16_w, _ = run(binary, mpiexec, config, tmp, 4, f"bf16_resume_z{stage}", *z,
                                                  "checkpoint.dir=" + ck)
            ok = (len(masters) == 4 and all(b["dtype"] == "f32" for b in masters) and resumed16 == whole16[3:]
                  and resumed16_w == whole16_w)
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} bf16 tensor=2 data=2 zero={stage} checkpoint after step 3: "
                  f"{len(masters)} f32 master blobs; resumed: {'bitwise equal to' if ok else 'differs from'} the "
                  f"uninterrupted run")
        # Resharding: per-rank optimizer state resumed on other layouts. Written at (2, 1, 2) stage 3
        # after step 6 of 9, resumed to step 9 on one rank (stage 0: the pieces reassembled whole),
        # at data = 4 stage 1, at pipeline 2 x data 2 stage 2, at its own layout unsharded (stage 0)
        # and at stage 1 (the same pieces, read as they are), and at data 2 stage 1 with the optimizer
        # offloaded to the host: each gives the uninterrupted one-rank run's losses and weights.
        nine = ["train.steps=9"]
        _, ref9_loss, ref9_norms, ref9_w, _ = run(binary, mpiexec, config, tmp, 1, "ref9", *nine)
        ck = os.path.join(tmp, "ck_reshard")
        run(binary, mpiexec, config, tmp, 4, "reshard_first", *nine, "parallel.tensor=2", "zero.stage=3",
            "checkpoint.dir=" + ck, "train.stop_after=6")
        step6 = os.path.join(ck, "step_00000006")
        for ranks, sets in [(1, []), (4, ["zero.stage=1"]), (4, ["parallel.pipeline=2", "zero.stage=2"]),
                            (4, ["parallel.tensor=2", "zero.stage=1"]), (4, ["parallel.tensor=2", "zero.stage=0"]),
                            (2, ["zero.stage=1", "zero.offload=cpu"])]:
            tag = "reshard_" + "_".join(x.replace("parallel.", "").replace("=", "") for x in sets) + f"_n{ranks}"
            _, loss, norms, w, out = run(binary, mpiexec, config, tmp, ranks, tag, *nine, *sets,
                                         "checkpoint.resume=" + step6)
            same_pieces = sets == ["parallel.tensor=2", "zero.stage=1"]
            said = ("resharding it for" in out) != same_pieces
            dl, dn = rel(loss, ref9_loss[6:]), rel(norms, ref9_norms[6:])
            dw = max(abs(a - b) for a, b in zip(w, ref9_w))
            ok = said and len(loss) == 3 and dl <= LOSS_TOL and dn <= NORM_TOL and dw <= WEIGHT_MAX_TOL
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} stage-3 checkpoint of tensor=2 data=2 resumed on {ranks} rank(s) "
                  f"{' '.join(sets)}: {'resharded' if 'resharding it for' in out else 'its own pieces'}; max loss rel "
                  f"diff {dl:.2e}, grad norm {dn:.2e}, weights max abs diff {dw:.2e} against the uninterrupted run")
        # bf16: the per-rank f32 masters reassembled too; split again beside the one rank's bf16
        # parameters (a wrong master would be wrong parameters). bf16 rounds differently on each
        # layout, so the resumed run is held to the uninterrupted one of the layout that wrote it by
        # bf16's measure.
        b16 = nine + ["train.precision=bf16"]
        _, src16, _, _, _ = run(binary, mpiexec, config, tmp, 4, "reshard16_src", *b16, "parallel.tensor=2",
                                "zero.stage=3")
        ck = os.path.join(tmp, "ck_reshard16")
        run(binary, mpiexec, config, tmp, 4, "reshard16_first", *b16, "parallel.tensor=2", "zero.stage=3",
            "checkpoint.dir=" + ck, "train.stop_after=6")
        _, loss, _, _, out = run(binary, mpiexec, config, tmp, 1, "reshard16_n1", *b16,
                                 "checkpoint.resume=" + os.path.join(ck, "step_00000006"))
        dl = rel(loss, src16[6:])
        ok = "resharding it for" in out and len(loss) == 3 and dl <= 1e-3
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} bf16 stage-3 checkpoint of tensor=2 data=2 resumed on one rank: max loss "
              f"rel diff {dl:.2e} against the uninterrupted tensor=2 data=2 run")
        # Written by 2 stages split "3,1" (parallel.stage_layers) at data 2, stage 1; resumed on one
        # rank, at tensor 2 x data 2, stage 3, and at pipeline 4 (where a rank reads only the writing
        # stages that hold its blocks).
        split = four + nine + ["parallel.pipeline=2", "parallel.stage_layers=3,1", "zero.stage=1"]
        _, ref49_loss, ref49_norms, ref49_w, _ = run(binary, mpiexec, config, tmp, 1, "ref49", *four, *nine)
        ck = os.path.join(tmp, "ck_reshard_split")
        run(binary, mpiexec, config, tmp, 4, "reshard_split_first", *split, "checkpoint.dir=" + ck,
            "train.stop_after=6")
        for ranks, sets in [(1, []), (4, ["parallel.tensor=2", "zero.stage=3"]), (4, ["parallel.pipeline=4"])]:
            tag = f"reshard_split_n{ranks}_" + "_".join(x.replace("parallel.", "").replace("=", "") for x in sets)
            _, loss, norms, w, out = run(binary, mpiexec, config, tmp, ranks, tag, *four, *nine,
                                         *sets, "checkpoint.resume=" + os.path.join(ck, "step_00000006"))
            dl, dn = rel(loss, ref49_loss[6:]), rel(norms, ref49_norms[6:])
            dw = max(abs(a - b) for a, b in zip(w, ref49_w))
            ok = ("layers per virtual stage 3,1; resharding" in out and len(loss) == 3 and dl <= LOSS_TOL
                  and dn <= NORM_TOL and dw <= WEIGHT_MAX_TOL)
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} checkpoint of pipeline=2 (stage_layers 3,1) data=2 zero=1 resumed on "
                  f"{ranks} rank(s) {' '.join(sets)}: max loss rel diff {dl:.2e}, grad norm {dn:.2e}, weights max abs "
                  f"diff {dw:.2e} against the uninterrupted run")
    print("FAIL" if failed else "PASS")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
