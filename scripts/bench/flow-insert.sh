#!/usr/bin/env bash
# Flow insertion rate: `ovs-ofctl -O OpenFlow13 add-flows` of N rules (default 100,000) into a
# Vireo bridge and into an OVS 3.1 bridge (userspace netdev datapath) on the same machine,
# interleaved over several rounds. After each load, one packet matching the LAST rule is checked
# to follow it (Vireo: dummy-port inject/capture), so "in the pipeline and usable" is measured,
# not just "accepted". Prints one line per trial and the medians.
#   flow-insert.sh [N] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
n="${1:-100000}"; rounds="${2:-3}"
cargo build --release -q -p vireo
bin=$PWD/target/release
work=$(mktemp -d /tmp/vireo-flowins.XXXXXX)
flows=$work/flows.txt
python3 - "$n" > "$flows" <<'PY'
import sys
n = int(sys.argv[1])
for i in range(n):
    print(f"priority=100,ip,nw_dst=10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255},actions=output:2")
PY

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

vireo_trial() {
    local run=$work/vireo-$1
    mkdir -p "$run"
    "$bin/vireod" --run-dir "$run" --pmd-cores 0 2>"$run/log" & local pid=$!
    for _ in $(seq 100); do "$bin/vireoctl" --run-dir "$run" version >/dev/null 2>&1 && break; sleep 0.05; done
    local c="$bin/vireoctl --run-dir $run"
    $c add-br br0 internal=false; $c add-port br0 p1 type=dummy; $c add-port br0 p2 type=dummy
    local t0=$(date +%s.%N)
    ovs-ofctl -O OpenFlow13 add-flows "unix:$run/br0.mgmt" "$flows"
    local t1=$(date +%s.%N)
    # The last rule's packet: 10.x.y.z from the last index, UDP, in on p1 -> must leave on p2.
    local last=$((n - 1))
    local dst=$(printf '0a%02x%02x%02x' $(((last >> 16) & 255)) $(((last >> 8) & 255)) $((last & 255)))
    local frame="00000000000200000000000108004500001c0000000040110000"0a000001"$dst""04d2162e00080000"
    $c inject p1 "$frame"
    local got=""
    for _ in $(seq 100); do got=$($c capture p2); [ -n "$got" ] && break; sleep 0.02; done
    local count=$($c --json dump-flows br0 | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
    kill "$pid"; wait "$pid" 2>/dev/null || true
    [ -n "$got" ] || { echo "vireo: packet for the last rule did not follow it" >&2; exit 1; }
    python3 -c "import sys; t=float(sys.argv[2])-float(sys.argv[1]); print(f'vireo round {sys.argv[3]}: {sys.argv[4]} rules in {t:.2f} s = {int(sys.argv[4])/t:,.0f} rules/s')" "$t0" "$t1" "$1" "$count"
}

ovs_trial() {
    local d=$work/ovs-$1
    mkdir -p "$d"
    export OVS_RUNDIR=$d OVS_LOGDIR=$d OVS_DBDIR=$d
    ovsdb-tool create "$d/conf.db" /usr/share/openvswitch/vswitch.ovsschema
    ovsdb-server --remote=punix:"$d/db.sock" --pidfile="$d/ovsdb.pid" --detach --log-file="$d/ovsdb.log" "$d/conf.db"
    ovs-vsctl --db=unix:"$d/db.sock" --no-wait init
    /usr/lib/openvswitch-switch/ovs-vswitchd unix:"$d/db.sock" --pidfile="$d/vswitchd.pid" --detach --log-file="$d/vswitchd.log"
    ovs-vsctl --db=unix:"$d/db.sock" add-br br0 -- set bridge br0 datapath_type=netdev
    ovs-vsctl --db=unix:"$d/db.sock" add-port br0 p1 -- set Interface p1 type=dummy ofport_request=1
    ovs-vsctl --db=unix:"$d/db.sock" add-port br0 p2 -- set Interface p2 type=dummy ofport_request=2
    local t0=$(date +%s.%N)
    ovs-ofctl -O OpenFlow13 add-flows "unix:$d/br0.mgmt" "$flows"
    local t1=$(date +%s.%N)
    local count=$(ovs-ofctl -O OpenFlow13 dump-aggregate "unix:$d/br0.mgmt" | sed -n 's/.*flow_count=\([0-9]*\).*/\1/p')
    kill "$(cat "$d/vswitchd.pid")" "$(cat "$d/ovsdb.pid")"; sleep 0.5
    python3 -c "import sys; t=float(sys.argv[2])-float(sys.argv[1]); print(f'ovs   round {sys.argv[3]}: {sys.argv[4]} rules in {t:.2f} s = {int(sys.argv[4])/t:,.0f} rules/s')" "$t0" "$t1" "$1" "$count"
}

for r in $(seq "$rounds"); do
    vireo_trial "$r"
    ovs_trial "$r"
done | tee "$work/results.txt"
python3 - "$work/results.txt" <<'PY'
import re, statistics, sys
rates = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\w+)\s+round \d+: \d+ rules in ([\d.]+) s = ([\d,]+) rules/s", line)
    if m:
        rates.setdefault(m[1], []).append(float(m[3].replace(",", "")))
for k, v in rates.items():
    print(f"{k}: median {statistics.median(v):,.0f} rules/s (min {min(v):,.0f}, max {max(v):,.0f}, n={len(v)})")
if "vireo" in rates and "ovs" in rates:
    print(f"ratio vireo/ovs: {statistics.median(rates['vireo'])/statistics.median(rates['ovs']):.2f}")
PY
