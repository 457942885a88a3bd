#!/usr/bin/env bash
# Builds the Python extension module in the dev profile with the workspace's compiled
# dependencies (the same feature resolution as `cargo test --workspace --all-targets
# --features cli`, so nothing else is rebuilt), puts it beside python/gpusort/__init__.py,
# and runs the pytest suite (CI tests the installed wheel instead: .ci/run). Needs pytest, numpy, pyarrow, pandas and datafusion==55.0.0 (the oracle):
#   python3 -m pip install pytest numpy pyarrow pandas datafusion==55.0.0
set -euo pipefail
cd "$(dirname "$0")/.."
export PYO3_BUILD_EXTENSION_MODULE=1
cargo build --workspace --all-targets --features cli
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
ln -sf "$target_dir/debug/lib_gpusort.so" python/gpusort/_gpusort.abi3.so
python3 -m pytest python/tests "$@"
