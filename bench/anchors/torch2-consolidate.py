#!/usr/bin/env python3
"""torch2-consolidate.py -- the torch >= 2.4 ways to merge a DCP checkpoint,
timed: the anchors for the ckptmerge jobs of bench/cmd/bench
(run with the test venv's Python, torch 2.4 or newer).

Usage
  python bench/anchors/torch2-consolidate.py torch_save  CKPT OUT.pt
  python bench/anchors/torch2-consolidate.py safetensors CKPT OUT.safetensors
  python bench/anchors/torch2-consolidate.py hf_consolidate HF_SHARDED OUTDIR [THREADS]

  torch_save   torch's own offline tool:
               torch.distributed.checkpoint.format_utils.dcp_to_torch_save
  safetensors  what `accelerate merge-weights` does: _load_state_dict into
               an empty state dict with _EmptyStateDictLoadPlanner
               (no_dist), then safetensors.torch.save_file of the "model"
               entry (or of everything, for a flat checkpoint)
  hf_consolidate  torch's own DCP -> HF safetensors consolidation,
               torch.distributed.checkpoint._consolidate_hf_safetensors.
               consolidate_safetensors_files, on the per-rank sharded
               safetensors that HuggingFaceStorageWriter(save_distributed=
               True) wrote (it reads no .distcp). Its num_threads works per
               output file, so THREADS (default 1) threads write THREADS
               files (model-0000i-of-0000N.safetensors + index), tensors
               assigned round-robin by size.
All fsync the output. Prints the phase timings, then
{"bench": {"import_s", "merge_s", "total_s"}}.
"""

import json
import os
import sys
import time


def main():
    if len(sys.argv) not in (4, 5) or sys.argv[1] not in ("torch_save", "safetensors", "hf_consolidate") or \
            (len(sys.argv) == 5 and sys.argv[1] != "hf_consolidate"):
        sys.exit(__doc__)
    mode, ckpt, out = sys.argv[1:4]
    threads = int(sys.argv[4]) if len(sys.argv) == 5 else 1
    t0 = time.perf_counter()
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner, dcp_to_torch_save
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    t1 = time.perf_counter()
    outs = [out]
    if mode == "torch_save":
        dcp_to_torch_save(ckpt, out)
    elif mode == "hf_consolidate":
        from safetensors import safe_open
        from torch.distributed.checkpoint._consolidate_hf_safetensors import consolidate_safetensors_files

        sizes = {}
        for f in sorted(os.listdir(ckpt)):
            if f.endswith(".safetensors"):
                with safe_open(os.path.join(ckpt, f), "pt") as st:
                    for k in st.keys():
                        sizes[k] = sizes.get(k, 0) + st.get_slice(k).get_shape()[0]
        mapping, load = {}, [0] * threads
        for k in sorted(sizes, key=lambda k: -sizes[k]):
            i = load.index(min(load))
            mapping[k] = i + 1
            load[i] += sizes[k]
        os.makedirs(out, exist_ok=True)
        consolidate_safetensors_files(ckpt, out, mapping, num_threads=threads)
        outs = [os.path.join(out, f) for f in os.listdir(out)]
    else:
        from safetensors.torch import save_file

        sd = {}
        _load_state_dict(sd, storage_reader=dcp.FileSystemReader(ckpt), planner=_EmptyStateDictLoadPlanner(), no_dist=True)
        model = sd["model"] if isinstance(sd.get("model"), dict) else sd
        save_file({k: v for k, v in model.items() if isinstance(v, torch.Tensor)}, out, metadata={"format": "pt"})
    for o in outs:
        fd = os.open(o, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    t2 = time.perf_counter()
    res = {"import_s": round(t1 - t0, 3), "merge_s": round(t2 - t1, 3), "total_s": round(t2 - t0, 3)}
    print(json.dumps({"torch": torch.__version__, "mode": mode, "threads": threads, **res}))
    print(json.dumps({"bench": res}), flush=True)


if __name__ == "__main__":
    main()
