"""Benchmark: loading an HF base model into FSDP2 on N ranks of this machine
(gloo, CPU), side by side in one run (issue 28).

    python bench/load_pretrained/bench_load.py --dir /tmp/ferry-load-bench [--ranks 4] [--serve bin/ferry-serve]

Writes (once) a Llama-shaped random-init bf16 checkpoint of about 1.7 GB in
several shard files under DIR/model, then, for each method, one torchrun
launch of N ranks that times, between two barriers (imports, the model's
modeling module included, and process start excluded), everything from
nothing to "every rank holds its loaded FSDP2 shard":

  seed        from_pretrained(dtype=bf16) on every rank, then fully_shard
              (what the seeds do, with FSDP2 instead of FSDP1)
  dcp-hf      meta model, fully_shard, to_empty, then torch's
              dcp.load(get_model_state_dict(model), HuggingFaceStorageReader)
  rank0-bcast rank 0 from_pretrained, the others meta; fully_shard,
              to_empty, set_model_state_dict(full_state_dict=True,
              broadcast_from_rank0=True): the rank-0-reads-and-broadcasts
              pattern of accelerate's RAM-efficient loading (torch's own
              call, not accelerate's code)
  ferry       meta model, fully_shard, ferry.load_pretrained(model, DIR)
  ferry-serve the same with serve=SOCKET (one ferry-serve for the node)

The node's peak memory is sampled every 20 ms as the sum of the PSS of the
rank processes (and the daemon), so shared file pages count once. Files are
in the page cache for every method (a warm-up read first); the read floor
is dd iflag=direct of the same files (cold, from the disk). Prints one JSON
object per method and a summary; writes DIR/results.json.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def worker(args):
    import torch
    import torch.distributed as dist
    import transformers
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    path = args.model
    cfg = transformers.AutoConfig.from_pretrained(path)

    def shard(m):
        for layer in m.model.layers:
            fully_shard(layer)
        fully_shard(m)
        return m

    def meta():
        with torch.device("meta"):
            return transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)

    # the node's memory before loading: every rank's PSS after its imports
    # (the timed region's baseline; the peak above it is what loading adds)
    import psutil

    import importlib

    import ferry  # imported before the baseline, as torch and transformers are

    # the model's modeling module too (transformers imports it lazily, a few
    # seconds on this machine, the same for every method): start-up, not load
    importlib.import_module(f"transformers.models.{cfg.model_type}.modeling_{cfg.model_type}")

    me = psutil.Process()
    pss0 = me.memory_full_info().pss
    if rank == 0:  # the torchrun agent: the sampler counts it too
        pss0 += me.parent().memory_full_info().pss
    base = torch.tensor([float(pss0)], dtype=torch.float64)
    dist.all_reduce(base)

    dist.barrier()
    t0 = time.monotonic()
    if args.method == "seed":
        m = shard(transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16))
    elif args.method == "dcp-hf":
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import HuggingFaceStorageReader
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

        m = shard(meta())
        m.to_empty(device="cpu")
        sd = get_model_state_dict(m)
        dcp.load(sd, storage_reader=HuggingFaceStorageReader(path))
        set_model_state_dict(m, sd)
    elif args.method == "rank0-bcast":
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        full = None
        if rank == 0:
            full = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).state_dict()
        m = shard(meta())
        m.to_empty(device="cpu")
        set_model_state_dict(m, full or {}, options=StateDictOptions(full_state_dict=True,
                                                                      broadcast_from_rank0=True))
        del full
    elif args.method in ("ferry", "ferry-serve"):
        m = shard(meta())
        ferry.load_pretrained(m, path, serve=args.serve if args.method == "ferry-serve" else None)
    else:
        raise SystemExit(f"unknown method {args.method}")
    dist.barrier()
    dt = time.monotonic() - t0
    # a check that every method loaded the same thing: a checksum of the
    # local shards, summed over the ranks
    s = torch.zeros(1, dtype=torch.float64)
    for p in m.parameters():
        flat = p.to_local().reshape(-1)
        for i in range(0, flat.numel(), 1 << 20):  # in pieces: no whole-tensor float64 copy in the peak
            s += flat[i:i + (1 << 20)].double().sum()
    dist.all_reduce(s)
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump({"seconds": dt, "checksum": s.item(), "baseline_pss": base.item()}, f)
    dist.destroy_process_group()


# full: ~1.7 GB in 4 files (the "at least 1.5 GB"); quick: ~0.2 GB in 3
SIZES = {
    "full": dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                 num_attention_heads=16, num_key_value_heads=4, max_shard_size="500MB"),
    "quick": dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=6,
                  num_attention_heads=8, num_key_value_heads=4, max_shard_size="80MB"),
}


def make_model(d, size="full"):
    import torch
    import transformers

    if os.path.exists(os.path.join(d, "model.safetensors.index.json")):
        return
    kw = dict(SIZES[size])
    shard = kw.pop("max_shard_size")
    cfg = transformers.LlamaConfig(max_position_embeddings=2048, tie_word_embeddings=False, **kw)
    torch.manual_seed(0)
    with torch.no_grad():
        m = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    m.save_pretrained(d + ".tmp", max_shard_size=shard)
    os.rename(d + ".tmp", d)


def pss(pids):
    import psutil

    total = 0
    for pid in pids:
        try:
            p = psutil.Process(pid)
            procs = [p, *p.children(recursive=True)]
        except psutil.Error:
            continue
        for q in procs:
            try:
                total += q.memory_full_info().pss
            except psutil.Error:
                pass
    return total


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_method(args, method, sock, daemon_pid):
    out = os.path.join(args.dir, f"{method}.json")
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={args.ranks}", "--master_addr=127.0.0.1",
           f"--master_port={free_port()}", os.path.abspath(__file__), "--worker", "--method", method, "--model",
           os.path.join(args.dir, "model"), "--out", out, "--serve", sock or ""]
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = [0]
    stop = threading.Event()

    def sample():
        pids = [proc.pid] + ([daemon_pid] if daemon_pid else [])
        while not stop.is_set():
            peak[0] = max(peak[0], pss(pids))
            time.sleep(0.02)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    log, _ = proc.communicate()
    stop.set()
    th.join()
    if proc.returncode != 0:
        raise SystemExit(f"{method}: exit {proc.returncode}\n{log[-4000:]}")
    with open(out) as f:
        r = json.load(f)
    r.update(method=method, peak_node_pss=peak[0], wall=time.monotonic() - t0)
    r["peak_above_baseline"] = max(0.0, peak[0] - r["baseline_pss"])
    return r


def model_files(d):
    files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".safetensors"))
    return files, sum(os.path.getsize(f) for f in files)


def one(args):
    """One method, as a side of a bench/cmd/bench job: warm the page cache,
    run the method (with its own ferry-serve for ferry-serve), and print the
    bench line; the checksum goes to --out-json for the job's check."""
    model = os.path.join(args.dir, "model")
    files, size = model_files(model)
    for f in files:
        subprocess.run(["cat", f], stdout=subprocess.DEVNULL, check=True)
    sock, daemon = None, None
    if args.one == "ferry-serve":
        sock = os.path.join(args.dir, f"ferry-{os.getpid()}.sock")
        daemon = subprocess.Popen([args.ferry_serve, "--socket", sock, "--quiet"])
        for _ in range(500):
            if os.path.exists(sock):
                break
            time.sleep(0.02)
    try:
        r = run_method(args, args.one, sock, daemon.pid if daemon else None)
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait()
    with open(args.out_json, "w") as f:
        json.dump(r, f)
    fl = dd_direct(files)
    print(json.dumps({"bench": {"load_s": r["seconds"], "load_over_dd_floor": r["seconds"] / fl, "dd_direct_s": fl, "peak_node_pss_mb": r["peak_node_pss"] / 1e6,
                                "peak_above_baseline_mb": r["peak_above_baseline"] / 1e6,
                                "peak_above_baseline_over_checkpoint": r["peak_above_baseline"] / size,
                                "checkpoint_mb": size / 1e6}}), flush=True)


def dd_direct(files):
    """Seconds for dd iflag=direct of the files: the disk's read floor."""
    t0 = time.monotonic()
    for f in files:
        subprocess.run(["dd", f"if={f}", "of=/dev/null", "bs=16M", "iflag=direct"], check=True, capture_output=True)
    return time.monotonic() - t0


def read_floor(args):
    files, size = model_files(os.path.join(args.dir, "model"))
    print(json.dumps({"dd_direct_s": dd_direct(files), "bytes": size, "files": len(files)}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--method")
    ap.add_argument("--model")
    ap.add_argument("--out")
    ap.add_argument("--serve", default="")
    ap.add_argument("--dir", default="/tmp/ferry-load-bench")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--methods", default="ferry,ferry-serve,dcp-hf,rank0-bcast,seed")
    ap.add_argument("--ferry-serve", default=os.path.join(HERE, "..", "..", "bin", "ferry-serve"))
    ap.add_argument("--size", choices=sorted(SIZES), default="full", help="the checkpoint made in DIR/model")
    ap.add_argument("--make", action="store_true", help="only make DIR/model")
    ap.add_argument("--floor", action="store_true", help="only print the dd iflag=direct floor of DIR/model")
    ap.add_argument("--one", help="only this method, with a bench line (a bench/cmd/bench side)")
    ap.add_argument("--out-json", help="--one: where its result goes")
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    os.makedirs(args.dir, exist_ok=True)
    model = os.path.join(args.dir, "model")
    make_model(model, args.size)
    if args.make:
        return 0
    if args.floor:
        return read_floor(args)
    if args.one:
        return one(args)
    files, size = model_files(model)
    floor = dd_direct(files)
    for f in files:  # warm: every method reads from the page cache
        subprocess.run(["cat", f], stdout=subprocess.DEVNULL, check=True)
    sock = os.path.join(args.dir, "ferry.sock")
    daemon = subprocess.Popen([args.ferry_serve, "--socket", sock, "--quiet"])
    for _ in range(500):
        if os.path.exists(sock):
            break
        time.sleep(0.02)
    results = []
    try:
        for method in args.methods.split(","):
            r = run_method(args, method, sock if method == "ferry-serve" else None,
                           daemon.pid if method == "ferry-serve" else None)
            r["ratio_to_dd_floor"] = r["seconds"] / floor
            r["peak_over_checkpoint"] = r["peak_node_pss"] / size
            print(json.dumps(r), flush=True)
            results.append(r)
    finally:
        daemon.terminate()
        daemon.wait()
    by = {r["method"]: r for r in results}
    summary = {"checkpoint_bytes": size, "files": len(files), "ranks": args.ranks, "dd_direct_seconds": floor,
               "load_avg": os.getloadavg(), "results": results}
    for base in ("seed", "dcp-hf", "rank0-bcast"):
        for m in ("ferry", "ferry-serve"):
            if base in by and m in by:
                summary[f"{m}_speedup_vs_{base}"] = by[base]["seconds"] / by[m]["seconds"]
    sums = {r["checksum"] for r in results}
    summary["same_checksum"] = len(sums) == 1
    with open(os.path.join(args.dir, "results.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "results"}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
