#!/usr/bin/env bash
# Makes an example directory self-contained for `air run` (code_source:
# snapshot uploads only that directory): builds dataprep, ckptmerge and ferry-serve for
# linux/amd64 into DIR/bin and copies the ferry Python package into DIR/ferry.
#
#   examples/bundle.sh examples/torchrun-fsdp
#   examples/bundle.sh examples/ray-train
set -euo pipefail
dir=${1:?usage: examples/bundle.sh EXAMPLE_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(cd "$dir" && pwd)
mkdir -p "$dir/bin"
(cd "$root" && CGO_ENABLED=0 GOOS=linux GOARCH=${GOARCH:-amd64} go build -trimpath -o "$dir/bin/" ./cmd/dataprep ./cmd/ckptmerge ./cmd/ferry-serve)
rm -rf "$dir/ferry"
mkdir -p "$dir/ferry"
cp "$root"/python/ferry/*.py "$dir/ferry/"
echo "bundle: $dir/bin/{dataprep,ckptmerge,ferry-serve} and $dir/ferry ready; now: cd $dir && air run -f train.yaml"
