#!/usr/bin/env bash
# Bounded work per burst under attack: DPDK testpmd forwards traffic through two vhost-user
# ports of a release vireod (PMD on core 0, testpmd's forwarding lcore on core 1) while a third
# port's guest (crates/vhost/examples/hostile-guest.rs, on core 1, sleeping between re-posts)
# keeps posting the costliest chains a guest can make: ring-long loops of zero-length
# descriptors, indirect tables at the cap, and frames that come back (in_port=p3,
# actions=in_port) into rx buffers that are maximal mergeable gathers. Trials with and without
# the attacker are interleaved over ROUNDS rounds; each prints testpmd's aggregate Rx-pps
# (median of its 1-second periods after a warm-up) and the attacker port's counters. The
# summary gives median and spread (max - min) per binary and case.
#   scripts/bench/hostile-guest.sh [ROUNDS] [SECS]
#   VIREOD=path      the vireod to measure (default: target/release/vireod, built here;
#                    vireoctl is taken from the same directory)
#   VIREOD_OLD=path  a second vireod (e.g. built from main), measured in the same rounds
#   ATTACK="--period-us 500 --per-post 16 --ring 32768"  the attacker's options
#   RT=1 (default)   vireod and testpmd run at SCHED_RR priority 1 and the attacker at 2 (it
#                    preempts testpmd's busy lcore on core 1 for the few microseconds of each
#                    re-post), as `vireo-bench --rt` does: other work on a shared machine
#                    cannot preempt them. RT=0: normal priority.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"
rounds="${1:-3}"; secs="${2:-10}"
attack_opts="${ATTACK:---period-us 500 --per-post 16 --ring 32768}"
rt1=(); rt2=()
if [ "${RT:-1}" = 1 ]; then rt1=(chrt -r 1); rt2=(chrt -r 2); fi
command -v dpdk-testpmd >/dev/null || { echo "dpdk-testpmd missing: run scripts/setup.sh" >&2; exit 1; }
if [ -z "${VIREOD:-}" ]; then
    cargo build --release -q -p vireo
    VIREOD=$PWD/target/release/vireod
fi
cargo build --release -q -p vhost --features mock --example hostile-guest
attacker=$PWD/target/release/examples/hostile-guest
work=$(mktemp -d /tmp/vireo-hostile.XXXXXX)
results=$work/results.txt
: > "$results"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }

# trial LABEL VIREOD ATTACK(0|1) ROUND
trial() {
    local label=$1 vireod=$2 attack=$3 round=$4
    local run=$work/$label-$attack-$round
    local ctl="$(dirname "$vireod")/vireoctl --run-dir $run"
    mkdir -p "$run"
    "${rt1[@]}" "$vireod" --run-dir "$run" --pmd-cores 0 2>"$run/vireod.log" & local vpid=$!
    pids+=("$vpid")
    for _ in $(seq 200); do $ctl version >/dev/null 2>&1 && break; sleep 0.05; done
    $ctl add-br br0 internal=false
    for p in p1 p2 p3; do $ctl add-port br0 $p type=vhost-user; done
    $ctl add-flow br0 in_port=p1,actions=output:p2
    $ctl add-flow br0 in_port=p2,actions=output:p1
    $ctl add-flow br0 in_port=p3,actions=in_port
    local apid=""
    if [ "$attack" = 1 ]; then
        # shellcheck disable=SC2086
        "${rt2[@]}" taskset -c 1 "$attacker" "$run/p3.sock" --secs $((secs + 20)) $attack_opts \
            >"$run/attacker.json" 2>"$run/attacker.log" & apid=$!
        pids+=("$apid")
        for _ in $(seq 100); do
            $ctl --json show 2>/dev/null | grep -q '"connected"' && break
            sleep 0.05
        done
    fi
    "${rt1[@]}" dpdk-testpmd --lcores '0@0,1@1' -n 1 --no-pci --no-huge -m 1024 \
        --file-prefix="vireo-budget-$$-$label-$round-$attack" \
        --vdev "net_virtio_user0,mac=00:01:02:03:04:05,path=$run/p1.sock,queues=1" \
        --vdev "net_virtio_user1,mac=00:01:02:03:04:06,path=$run/p2.sock,queues=1" \
        -- --nb-cores=1 --forward-mode=io --tx-first --burst=512 --stats-period=1 \
        --txd=1024 --rxd=1024 --total-num-mbufs=16384 >"$run/testpmd.log" 2>&1 & local tpid=$!
    pids+=("$tpid")
    # Wait for testpmd's first stats period, then 2 s of warm-up.
    for _ in $(seq 300); do grep -q Rx-pps "$run/testpmd.log" 2>/dev/null && break; sleep 0.1; done
    sleep 2
    local a0=0; [ -n "$apid" ] && a0=$(cpu_ticks "$apid")
    local n0; n0=$(grep -c Rx-pps "$run/testpmd.log" || true)
    $ctl --json pmd-stats-show >"$run/pmd0.json"
    sleep "$secs"
    local n1; n1=$(grep -c Rx-pps "$run/testpmd.log" || true)
    $ctl --json pmd-stats-show >"$run/pmd1.json"
    local a1=0; [ -n "$apid" ] && a1=$(cpu_ticks "$apid")
    $ctl --json port-stats p3 >"$run/p3.json"
    $ctl --json show >"$run/show.json"
    kill -INT "$tpid"; wait "$tpid" 2>/dev/null || true
    rm -rf "/var/run/dpdk/vireo-budget-$$-$label-$round-$attack"
    [ -n "$apid" ] && { kill "$apid" 2>/dev/null || true; wait "$apid" 2>/dev/null || true; }
    kill "$vpid"; wait "$vpid" 2>/dev/null || true
    python3 - "$run" "$label" "$attack" "$round" "$secs" "$a0" "$a1" "$n0" "$n1" >>"$results" <<'PY'
import json, re, statistics, sys
run, label, attack, rnd, secs, a0, a1, n0, n1 = sys.argv[1:10]
log = open(f"{run}/testpmd.log", errors="replace").read()
# One stats block per period: NIC statistics for port 0 then port 1, each with Rx-pps.
pps = [int(x) for x in re.findall(r"Rx-pps:\s+(\d+)", log)]
# The periods printed during the measurement window (two ports per period).
n0, n1 = int(n0) // 2 * 2, int(n1) // 2 * 2
win = [pps[i] + pps[i + 1] for i in range(n0, min(n1, len(pps) - 1), 2)]
mpps = statistics.median(win) / 1e6 if win else 0.0
p3 = json.load(open(f"{run}/p3.json"))
p3 = p3[0] if isinstance(p3, list) else p3
drops = p3.get("drops", {})
cuts = p3.get("budget_cuts", "n/a")
def busy(path):
    try:
        d = json.load(open(path))
        d = d[0] if isinstance(d, list) else d
        return d
    except Exception:
        return {}
b0, b1 = busy(f"{run}/pmd0.json"), busy(f"{run}/pmd1.json")
def delta(k):
    return b1.get(k, 0) - b0.get(k, 0)
cyc = delta("busy_cycles") + delta("idle_cycles")
pmd_busy = delta("busy_cycles") / cyc if cyc else 0.0
att_cpu = (int(a1) - int(a0)) / 100 / float(secs)
posts = "n/a"
try:
    lines = open(f"{run}/attacker.json").read().split()
    if lines:
        a = json.loads(lines[-1])
        posts = f"{a['chains'] / a['secs']:.0f}/s"
except Exception:
    pass
print(f"{label} attack={attack} round={rnd} mpps={mpps:.3f} periods={len(win)} "
      f"pmd_busy={pmd_busy:.3f} attacker_cpu={att_cpu:.3f} attacker_chains={posts} "
      f"p3_budget_cuts={cuts} p3_drops={json.dumps(drops, separators=(',', ':'))}")
PY
    tail -1 "$results"
}

labels=(new); bins=("$VIREOD")
if [ -n "${VIREOD_OLD:-}" ]; then labels+=(old); bins+=("$VIREOD_OLD"); fi
for r in $(seq "$rounds"); do
    for i in "${!labels[@]}"; do
        # Alternate the order of with/without from round to round.
        if [ $((r % 2)) = 1 ]; then order="0 1"; else order="1 0"; fi
        for a in $order; do trial "${labels[$i]}" "${bins[$i]}" "$a" "$r"; done
    done
done

echo "== summary ($(date -u '+%Y-%m-%d %H:%M UTC'), $rounds rounds x ${secs}s, attacker: $attack_opts)"
python3 - "$results" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) attack=(\d) round=\d+ mpps=([\d.]+)", line)
    if m:
        rows.setdefault((m[1], m[2]), []).append(float(m[3]))
for label in sorted({k[0] for k in rows}):
    base = rows.get((label, "0"), [])
    att = rows.get((label, "1"), [])
    def fmt(v):
        return f"median {statistics.median(v):.3f} Mpps, spread {max(v) - min(v):.3f} ({', '.join(f'{x:.3f}' for x in v)})" if v else "none"
    print(f"{label}: without attacker {fmt(base)}")
    print(f"{label}: with attacker    {fmt(att)}")
    if base and att:
        print(f"{label}: with/without = {statistics.median(att) / statistics.median(base):.3f}")
PY
echo "logs: $work"
