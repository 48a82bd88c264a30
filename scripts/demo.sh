#!/usr/bin/env bash
# Vireo's main job in one command: build, start vireod, create a bridge, and show packets
# flowing through it. Run as root on Debian 12 (installs what is missing first).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

echo "==> building (release)"
cargo build --release -q -p vireo
bin=target/release
run=$(mktemp -d /tmp/vireo-demo.XXXXXX)
ctl() { "$bin/vireoctl" --run-dir "$run" "$@"; }

"$bin/vireod" --run-dir "$run" --pmd-cores 0 2>"$run/vireod.log" &
vireod_pid=$!
cleanup() { kill "$vireod_pid" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 100); do ctl version >/dev/null 2>&1 && break; sleep 0.05; done

echo "==> vireoctl add-br br0; add two ports"
ctl add-br br0
ctl add-port br0 p1 type=dummy
ctl add-port br0 p2 type=dummy
ctl show
echo "==> vireod is running with run directory $run (log: $run/vireod.log)"
