#!/usr/bin/env bash
# Flow insertion next to live megaflows: `ovs-ofctl -O OpenFlow13 add-flows` of R rules (one
# FLOW_MOD + BARRIER each) into a Vireo bridge that first got M rules and one packet per rule
# (so M megaflows are cached), against the same load with no megaflow. Every BARRIER
# revalidates the datapath; this measures what that costs per rule. After each load the
# megaflows are counted again (they must still be there: the loaded rules overlap none) and one
# packet for the last loaded rule must leave by it.
#   flow-insert-live.sh [M] [R] [ROUNDS] [BIN_DIR...]
# BIN_DIR (default target/release, built): dirs with vireod and vireoctl, interleaved per round.
set -euo pipefail
cd "$(dirname "$0")/../.."
m="${1:-500}"; r="${2:-2000}"; rounds="${3:-3}"; shift $(($# < 3 ? $# : 3))
bins=("$@")
if [ ${#bins[@]} -eq 0 ]; then
    cargo build --release -q -p vireo
    bins=("$PWD/target/release")
fi
work=$(mktemp -d /tmp/vireo-flowlive.XXXXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
python3 - "$m" > "$work/pre.txt" <<'PY'
import sys
for i in range(int(sys.argv[1])):
    print(f"priority=100,ip,nw_dst=10.1.{(i >> 8) & 255}.{i & 255},actions=output:2")
PY
python3 - "$r" > "$work/load.txt" <<'PY'
import sys
for i in range(int(sys.argv[1])):
    print(f"priority=100,ip,nw_dst=10.2.{(i >> 8) & 255}.{i & 255},actions=output:2")
PY
frame() { # frame DST_HEX: UDP 10.0.0.1 -> DST, in on p1
    echo "00000000000200000000000108004500001c0000000040110000""0a000001""$1""04d2162e00080000"
}

trial() { # trial BIN_DIR MEGAFLOWS
    local bin=$1 want=$2 run=$work/run
    rm -rf "$run"; mkdir -p "$run"
    "$bin/vireod" --run-dir "$run" --pmd-cores 0 2>"$run/log" & pid=$!
    for _ in $(seq 100); do "$bin/vireoctl" --run-dir "$run" version >/dev/null 2>&1 && break; sleep 0.05; done
    local c="$bin/vireoctl --run-dir $run"
    $c add-br br0 internal=false; $c add-port br0 p1 type=dummy; $c add-port br0 p2 type=dummy
    if [ "$want" -gt 0 ]; then
        ovs-ofctl -O OpenFlow13 add-flows "unix:$run/br0.mgmt" "$work/pre.txt"
        for i in $(seq 0 $((want - 1))); do
            $c inject p1 "$(frame "$(printf '0a01%02x%02x' $(((i >> 8) & 255)) $((i & 255)))")"
        done
    fi
    local count='import json,sys; print(len(json.load(sys.stdin)))'
    local before; before=$($c --json dump-megaflows | python3 -c "$count")
    local t0; t0=$(date +%s.%N)
    ovs-ofctl -O OpenFlow13 add-flows "unix:$run/br0.mgmt" "$work/load.txt" 2>/dev/null
    local t1; t1=$(date +%s.%N)
    local after; after=$($c --json dump-megaflows | python3 -c "$count")
    local last=$((r - 1)) got=""
    $c inject p1 "$(frame "$(printf '0a02%02x%02x' $(((last >> 8) & 255)) $((last & 255)))")"
    for _ in $(seq 100); do got=$($c capture p2); [ -n "$got" ] && break; sleep 0.02; done
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
    [ -n "$got" ] || { echo "packet for the last loaded rule did not follow it" >&2; exit 1; }
    python3 -c "import sys; t=float(sys.argv[2])-float(sys.argv[1]); print(f'{sys.argv[3]} megaflows {sys.argv[4]} -> {sys.argv[5]}: {sys.argv[6]} rules in {t:.2f} s = {int(sys.argv[6])/t:,.0f} rules/s')" \
        "$t0" "$t1" "$bin" "$before" "$after" "$r"
}

for round in $(seq "$rounds"); do
    for b in "${bins[@]}"; do
        trial "$b" 0
        trial "$b" "$m"
    done
    echo "(round $round done)"
done
