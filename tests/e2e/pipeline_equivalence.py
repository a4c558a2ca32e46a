#!/usr/bin/env python3
"""Pipeline layout equivalence (DESIGN.md section 4) on the CPU in fp32: a tiny 8-layer GPT with
dropout trained for K steps on 1 rank and with pipeline = 2 and 4 (1f1b and gpipe), interleaved
(v = 2 at p = 2 and p = 4), pipeline 2 x data 2, with activation checkpointing (full; elementwise under the interleaved schedule), and with uneven stages listed by
parallel.stage_layers (reported in the start log and the metrics start record), gives the same losses, validation losses and
exported weights (gathered from the stages) up to fp32 reduction-order rounding. Checkpoints: a
pipeline run stopped and resumed continues bitwise, and its checkpoint (always in the whole
model's layout) resumes on one rank too; a checkpoint with per-rank optimizer state (ZeRO stage 1)
resumed by a run whose stages hold other layers is resharded and continues as the one-rank run
(also written as before the split was recorded: it is read from the saved config, or the run
stops with one line where that cannot be read either). Bad shapes fail on every rank with one clear line.
Usage: pipeline_equivalence.py TRAIN_GPT MPIEXEC CONFIG"""
import json
import os
import shutil
import sys
import tempfile

import equivalence
from equivalence import LOSS_TOL, WEIGHT_L2_TOL, WEIGHT_MAX_TOL, compare

STEPS = 8
BASE = ["train.device=cpu", f"train.steps={STEPS}", "model.n_layers=8", "train.micro_batch=2", "train.global_batch=8",
        "model.dropout=0.1", "log.val_every=4", "log.val_batches=2"]


def crc32c(data):
    """CRC-32C (Castagnoli), as checkpoint manifests record it."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def launch(binary, mpiexec, config, ranks, sets, extra=()):
    return equivalence.launch(binary, mpiexec, config, ranks, BASE + list(sets), extra)


def run(binary, mpiexec, config, tmp, ranks, tag, *sets, stdout=None):
    start, losses, val, w, names, _, out = equivalence.run(binary, mpiexec, config, tmp, ranks, tag, BASE + list(sets))
    if stdout is not None:
        stdout.append(out)
    return start, losses, val, w, names


def main():
    binary, mpiexec, config = sys.argv[1:4]
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        _, ref_loss, ref_val, ref_w, ref_names = run(binary, mpiexec, config, tmp, 1, "p1")
        # (ranks, pipeline, schedule, virtual stages, activation checkpointing)
        cases = [(2, 2, "1f1b", 1, "none"), (2, 2, "gpipe", 1, "none"), (4, 4, "1f1b", 1, "none"),
                 (4, 4, "gpipe", 1, "none"), (2, 2, "interleaved", 2, "none"), (4, 4, "interleaved", 2, "none"),
                 (4, 2, "1f1b", 1, "none"), (4, 2, "interleaved", 2, "none"), (2, 2, "1f1b", 1, "full"),
                 (4, 4, "interleaved", 2, "elementwise")]
        for ranks, pp, sched, v, ckpt in cases:
            data = ranks // pp
            tag = f"p{pp}_d{data}_{sched}_v{v}_{ckpt}"
            start, loss, val, w, names = run(binary, mpiexec, config, tmp, ranks, tag, f"parallel.pipeline={pp}",
                                             f"parallel.schedule={sched}", f"parallel.virtual_stages={v}",
                                             f"train.checkpointing={ckpt}")
            dl, dw, l2 = compare(loss, ref_loss, w, ref_w)
            ok_layout = start["layout"] == {"tensor": 1, "pipeline": pp, "data": data}
            ok = (ok_layout and names == ref_names and len(loss) == STEPS and len(w) == len(ref_w)
                  and dl <= LOSS_TOL and dw <= WEIGHT_MAX_TOL and l2 <= WEIGHT_L2_TOL)
            # Validation reads log.val_batches global batches: the same samples on every layout.
            dv = max(abs(a - b) / abs(b) for a, b in zip(val, ref_val))
            ok = ok and len(val) == len(ref_val) and dv <= LOSS_TOL
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} pipeline={pp} data={data} schedule={sched} v={v} checkpointing={ckpt}: "
                  f"layout reported "
                  f"{start['layout']}, max loss rel diff {dl:.2e}, val {dv:.2e}, weights: rel L2 diff {l2:.2e}, "
                  f"max abs diff {dw:.2e}")

        # Stages listed by hand (parallel.stage_layers, virtual-stage order), uneven on purpose.
        for pp, sched, v, split in [(2, "1f1b", 1, "1,7"), (2, "interleaved", 2, "1,3,2,2")]:
            out = []
            start, loss, val, w, names = run(binary, mpiexec, config, tmp, pp, f"split_{sched}_{split}",
                                         f"parallel.pipeline={pp}", f"parallel.schedule={sched}",
                                         f"parallel.virtual_stages={v}", f"parallel.stage_layers={split}", stdout=out)
            dl, dw, l2 = compare(loss, ref_loss, w, ref_w)
            dv = max(abs(a - b) / abs(b) for a, b in zip(val, ref_val))
            want = "layers per virtual stage: " + split.replace(",", " ") + " "
            reported = want in out[0] and start["stage_layers"] == [int(n) for n in split.split(",")]
            ok = (reported and names == ref_names and len(loss) == STEPS and len(w) == len(ref_w)
                  and dl <= LOSS_TOL and dw <= WEIGHT_MAX_TOL and l2 <= WEIGHT_L2_TOL and len(val) == len(ref_val)
                  and dv <= LOSS_TOL)
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} pipeline={pp} schedule={sched} v={v} stage_layers={split}: "
                  f"split {'reported (log, start record)' if reported else 'NOT reported'}, max loss rel diff {dl:.2e}, "
                  f"val {dv:.2e}, weights: rel L2 diff {l2:.2e}, max abs diff {dw:.2e}")

        # Checkpoints: stop a pipeline = 2 run after step 4, resume it with pipeline = 2 (bitwise the
        # uninterrupted run) and with one rank (the same run up to rounding).
        ck = os.path.join(tmp, "ck")
        pp2 = ["parallel.pipeline=2", "checkpoint.dir=" + ck]
        _, whole_loss, _, whole_w, _ = run(binary, mpiexec, config, tmp, 2, "ck_straight", "parallel.pipeline=2")
        run(binary, mpiexec, config, tmp, 2, "ck_first", *pp2, "train.stop_after=4")
        _, resumed, _, resumed_w, _ = run(binary, mpiexec, config, tmp, 2, "ck_resume", *pp2)
        ok = resumed == whole_loss[4:] and resumed_w == whole_w
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} pipeline=2 checkpoint after step 4, resumed with pipeline=2: "
              f"{'bitwise equal' if ok else 'differs from'} the uninterrupted run")
        ck1 = os.path.join(tmp, "ck1")
        run(binary, mpiexec, config, tmp, 2, "ck1_first", "parallel.pipeline=2", "checkpoint.dir=" + ck1,
            "train.stop_after=4")
        _, on_one, _, on_one_w, _ = run(binary, mpiexec, config, tmp, 1, "ck1_resume", "checkpoint.dir=" + ck1)
        dl, dw, l2 = compare(on_one, ref_loss[4:], on_one_w, ref_w)
        ok = len(on_one) == STEPS - 4 and dl <= LOSS_TOL and dw <= WEIGHT_MAX_TOL and l2 <= WEIGHT_L2_TOL
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} pipeline=2 checkpoint resumed on one rank: max loss rel diff {dl:.2e}, "
              f"weights: rel L2 diff {l2:.2e}, max abs diff {dw:.2e}")

        # A checkpoint with per-rank optimizer state (pipeline 2 x data 2, ZeRO stage 1, v = 2) resumed
        # with another split that gives each rank as many blocks but not the same ones: its pieces
        # are resharded (not read as this rank's), and the run continues as the one-rank run.
        ck2 = os.path.join(tmp, "ck_split")
        split_sets = ["parallel.pipeline=2", "parallel.schedule=interleaved", "parallel.virtual_stages=2",
                      "zero.stage=1", "checkpoint.dir=" + ck2]
        run(binary, mpiexec, config, tmp, 4, "ck_split_first", *split_sets, "parallel.stage_layers=3,1,1,3",
            "train.stop_after=4")
        outs = []
        _, resplit, _, resplit_w, _ = run(binary, mpiexec, config, tmp, 4, "ck_split_resume", *split_sets,
                                          "parallel.stage_layers=1,3,3,1", stdout=outs)
        out = outs[0]
        dl, dw, l2 = compare(resplit, ref_loss[4:], resplit_w, ref_w)
        said = "layers per virtual stage 3,1,1,3; resharding it for" in out and "layers per virtual stage 1,3,3,1" in out
        ok = said and len(resplit) == STEPS - 4 and dl <= LOSS_TOL and dw <= WEIGHT_MAX_TOL and l2 <= WEIGHT_L2_TOL
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} ZeRO-1 checkpoint of stage_layers=3,1,1,3 resumed with 1,3,3,1: "
              f"{'resharded' if said else 'NOT resharded'}; max loss rel diff {dl:.2e}, weights: rel L2 diff {l2:.2e}, "
              f"max abs diff {dw:.2e}")

        # The same checkpoint as written before the split was recorded (written_by_layout without
        # stage_layers): the split is read from its saved config, and the resumed run matches. Where
        # the config cannot give it either, every rank stops with one line, without hanging.
        for tag, edit, want in [("recovered", lambda meta: None, None),
                                ("unplaceable", lambda meta: meta.update(config=""), "predates checkpoints that record")]:
            old_ck = os.path.join(tmp, "ck_old_" + tag)
            shutil.copytree(ck2, old_ck)
            step = "step_00000004"  # where ck_split_first stopped (the resumed run saved step 8 beside it)
            manifest_path = os.path.join(old_ck, step, "manifest.json")
            manifest = json.load(open(manifest_path))
            meta = manifest.pop("meta")
            del meta["written_by_layout"]["stage_layers"]
            edit(meta)
            meta_text = json.dumps(meta)
            manifest["meta_crc32c"] = f"{crc32c(meta_text.encode()):08x}"
            open(manifest_path, "w").write(json.dumps(manifest)[:-1] + ', "meta": ' + meta_text + "}")
            old_sets = split_sets[:-1] + ["checkpoint.dir=" + os.path.join(tmp, "ck_old_out_" + tag),
                                          "checkpoint.resume=" + os.path.join(old_ck, step), "parallel.stage_layers=1,3,3,1"]
            if want is None:
                _, old_loss, _, old_w, _ = run(binary, mpiexec, config, tmp, 4, "ck_old_" + tag, *old_sets)
                dl, dw, l2 = compare(old_loss, ref_loss[4:], old_w, ref_w)
                ok = len(old_loss) == STEPS - 4 and dl <= LOSS_TOL and dw <= WEIGHT_MAX_TOL and l2 <= WEIGHT_L2_TOL
                print(f"{'ok  ' if ok else 'FAIL'} the checkpoint without a recorded split, resumed with 1,3,3,1: "
                      f"split read from its config; max loss rel diff {dl:.2e}, max abs weight diff {dw:.2e}")
            else:
                cmd, p = launch(binary, mpiexec, config, 4, old_sets)
                errors = [line for line in p.stderr.splitlines() if line.startswith("error")]
                ok = p.returncode != 0 and len(errors) == 1 and want in errors[0]
                print(f"{'ok  ' if ok else 'FAIL'} the checkpoint without a recorded split or a readable config: exit "
                      f"{p.returncode}, {errors[0] if len(errors) == 1 else errors}")
            failed |= not ok

        # Shapes that do not fit: one "error:" line, every rank exits non-zero, no crash banner.
        bad = [(2, ["parallel.pipeline=2", "parallel.schedule=interleaved", "parallel.virtual_stages=2",
                    "train.global_batch=6"], "to be a multiple of parallel.pipeline = 2"),
               (4, ["parallel.pipeline=4", "model.n_layers=3"],
                "model.n_layers = 3 is less than parallel.pipeline (4) x parallel.virtual_stages (1) = 4"),
               (2, ["parallel.pipeline=2", "parallel.schedule=interleaved", "parallel.virtual_stages=5"],
                "model.n_layers = 8 is less than parallel.pipeline (2) x parallel.virtual_stages (5) = 10"),
               (2, ["parallel.pipeline=2", "parallel.stage_layers=4,3"],
                'parallel.stage_layers = "4,3" sums to 7 (allowed: empty = balanced by cost, or parallel.pipeline x '
                'parallel.virtual_stages = 2 comma-separated integers >= 1')]
        for ranks, sets, want in bad:
            cmd, p = launch(binary, mpiexec, config, ranks, sets)
            errors = [line for line in p.stderr.splitlines() if line.startswith("error")]
            banner = any(b in p.stderr + p.stdout for b in ("MPI_ABORT", "terminate called", "Segmentation", "[rank "))
            ok = p.returncode != 0 and len(errors) == 1 and want in errors[0] and not banner
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} {' '.join(sets)}: exit {p.returncode}, "
                  f"{errors[0] if len(errors) == 1 else errors}")
    print("FAIL" if failed else "PASS")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
