#!/usr/bin/env bash
# bench/gpu/run.sh: proves ferry on one NVIDIA GPU in under 8 minutes, or runs
# the same code paths on CPU (--cpu-smoke, what make test runs). See
# bench/gpu/README.md.
#
#   bench/gpu/run.sh [--prepared DIR] [--out DIR] [--work DIR] [--cpu-smoke]
#                    [--budget SECONDS] [--python PY] [--keep-work]
#
#   --prepared DIR   what bench/gpu/prepare.sh wrote (default bench/work/gpu)
#   --out DIR        results: results.json, summary.md, run.log (default
#                    $OUT/gpu-results when $OUT is set, else bench/work/gpu-results)
#   --work DIR       where the scratch directory (shards, checkpoints) is made
#                    (default $TMPDIR or /tmp); removed at the end unless --keep-work
#   --cpu-smoke      CPU instead of CUDA, tiny sizes, few steps; every device
#                    part is marked as stubbed in the results
#   --budget S       the whole run's time limit (default 460; smoke 900)
#   --python PY      the interpreter (default $PYTHON, else python3)
#
# Parts, each a process under its own time cap (trimmed to what is left of
# the budget): prep (versions, dataprep, ferry-serve), packing (isolation on
# CUDA), train (seed vs ferry pad vs ferry pack, DCP save), checkpoint
# (ckptmerge, from_pretrained, load_pretrained). Each part writes its
# section of results.json as it goes, so a part that runs out of time still
# leaves what it measured. Exit status: 0 every check passed, 1 otherwise,
# 2 bad usage.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
prepared=$repo/bench/work/gpu
out=
work=
smoke=0
budget=
keep=0
py=${PYTHON:-python3}
while [ $# -gt 0 ]; do
	case $1 in
	--prepared) prepared=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--work) work=$2; shift 2 ;;
	--cpu-smoke) smoke=1; shift ;;
	--budget) budget=$2; shift 2 ;;
	--python) py=$2; shift 2 ;;
	--keep-work) keep=1; shift ;;
	-h|--help) sed -n '2,25p' "$0"; exit 0 ;;
	*) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
if [ -z "$out" ]; then
	if [ -n "${OUT:-}" ]; then out=$OUT/gpu-results; else out=$repo/bench/work/gpu-results; fi
fi
if [ -z "$budget" ]; then
	if [ $smoke = 1 ]; then budget=900; else budget=460; fi
fi
t0=$SECONDS
for f in bin/dataprep.xz bin/ckptmerge.xz bin/ferry-serve.xz alpaca.json.gz; do
	[ -f "$prepared/$f" ] || { echo "run.sh: $prepared/$f is missing: run bench/gpu/prepare.sh on the build machine and carry its output" >&2; exit 2; }
done
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
prepared=$(cd "$prepared" && pwd)
rm -f "$out/results.json" "$out/summary.md" "$out/run.log"
[ -n "$work" ] || work=${TMPDIR:-/tmp}
mkdir -p "$work" || exit 2
work=$(mktemp -d "$work/ferry-gpu.XXXXXX") || exit 1
[ $keep = 1 ] || trap 'rm -rf "$work"' EXIT
log=$out/run.log

say() { printf '[%4ds] %s\n' $((SECONDS - t0)) "$*" | tee -a "$log"; }

# The prepared files, unpacked.
mkdir -p "$work/bin" "$work/tok"
# (Python's lzma and pyarrow's zstd: the machine may have neither xz nor zstd.)
for b in dataprep ckptmerge ferry-serve; do
	"$py" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
		"$prepared/bin/$b.xz" "$work/bin/$b" && chmod +x "$work/bin/$b" || { say "cannot unpack $b"; exit 1; }
done
for t in qwen2.5 llama3.1; do
	mkdir -p "$work/tok/$t"
	"$py" -c 'import pyarrow as pa, sys; open(sys.argv[2], "wb").write(pa.input_stream(sys.argv[1], compression="zstd").read())' \
		"$repo/testdata/tokenizers/$t/tokenizer.json.zst" "$work/tok/$t/tokenizer.json" || { say "cannot unpack the $t tokenizer"; exit 1; }
	cp "$repo/testdata/tokenizers/$t/tokenizer_config.json" "$work/tok/$t/" || exit 1
done
gzip -dc "$prepared/alpaca.json.gz" >"$work/alpaca.json" || exit 1

# ferry: the installed package when there is one (make test), else python/.
if ! "$py" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("ferry") is None)' 2>/dev/null; then
	export PYTHONPATH=$repo/python${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
[ $smoke = 0 ] || export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} CUDA_VISIBLE_DEVICES=

common=(--results "$out/results.json" --work "$work" --prepared "$prepared" --repo "$repo")
[ $smoke = 0 ] || common+=(--cpu-smoke)

# part CAP_GPU CAP_SMOKE: run one part under its cap, trimmed to the budget
# left after RESERVE seconds kept for the summary.
reserve=10
part() {
	local name=$1 cap=$2
	[ $smoke = 0 ] || cap=$3
	local left=$((budget - (SECONDS - t0) - reserve))
	[ $cap -le $left ] || cap=$left
	if [ $cap -lt 15 ]; then
		say "$name: skipped, ${left}s of the ${budget}s budget left"
		"$py" "$here/check.py" mark --name "$name" --status skipped \
			--note "skipped: ${left}s of the ${budget}s budget left" "${common[@]}" >>"$log" 2>&1
		return
	fi
	say "$name: start (cap ${cap}s)"
	local s=$SECONDS
	timeout -k 10 "$cap" "$py" "$here/check.py" "$name" "${common[@]}" 2>&1 | tee -a "$log"
	local rc=${PIPESTATUS[0]}
	if [ $rc = 124 ] || [ $rc = 137 ]; then
		say "$name: timed out after ${cap}s"
		"$py" "$here/check.py" mark --name "$name" --status "timed out" \
			--note "killed after its ${cap}s cap; what it wrote before stands" "${common[@]}" >>"$log" 2>&1
	else
		say "$name: exit $rc after $((SECONDS - s))s"
		[ $rc = 0 ] || "$py" "$here/check.py" mark --name "$name" --status failed --if-running \
			--note "exit status $rc" "${common[@]}" >>"$log" 2>&1
	fi
}

#    name       GPU cap  smoke cap
part prep       60       120
part packing    150      300
part train      170      300
part checkpoint 60       200
"$py" "$here/check.py" summary --elapsed $((SECONDS - t0)) --budget "$budget" "${common[@]}" 2>&1 | tee -a "$log"
exit "${PIPESTATUS[0]}"
