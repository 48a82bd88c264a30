#!/usr/bin/env bash
# PMD scaling: N independent vhost-user port pairs (N "VM pairs"), N PMD threads, N vireo-gen
# generators, aggregate forwarded rate for each N. Each generator has its own core and plays both
# VMs of its pair; the rules forward in_port=aI <-> bI (p2p). Rounds interleave the N values.
# Needs a machine with at least 2*max(N)+1 cores: PMDs on cores 1..N, generators on
# cores N+1..2N (core 0 for vireod's control thread and this script). Only Vireo is measured
# (OVS-DPDK and testpmd are not on the multi-core machine this was written for).
#   pmd-scaling.sh BIN_DIR OUT_DIR "1 2 4 7" SIZE ROUNDS TRIAL_SECS
# PMD_BASE / GEN_BASE (environment) move the first PMD / generator core (a 2-core smoke run:
# PMD_BASE=0 GEN_BASE=1 with N=1).
# BIN_DIR holds vireod, vireoctl and vireo-gen (release). Prints one line per trial and writes
# OUT_DIR/scaling.tsv (n, size, round, aggregate rx Mpps, per-generator Mpps) and each trial's
# pmd-rxq-show / pmd-stats-show to OUT_DIR/details-SIZE.txt.
set -uo pipefail
bin=$1; out=$2; ns=${3:-"1 2 4"}; size=${4:-64}; rounds=${5:-3}; secs=${6:-3}
mkdir -p "$out"
work=$(mktemp -d /tmp/vireo-scaling.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; pids=(); }
trap 'cleanup; rm -rf "$work"' EXIT

trial() { # n round
    local n=$1 r=$2 run=$work/n$1-r$2-s$size
    mkdir -p "$run"
    local pb=${PMD_BASE:-1} gb=${GEN_BASE:-$((n + 1))}
    local cores; cores=$(seq -s, "$pb" $((pb + n - 1)))
    taskset -c 0 "$bin/vireod" --run-dir "$run" --pmd-cores "$cores" 2>"$run/vireod.log" &
    pids+=($!)
    local c="$bin/vireoctl --run-dir $run"
    for _ in $(seq 200); do $c version >/dev/null 2>&1 && break; sleep 0.05; done
    $c add-br br0 internal=false >/dev/null || { echo "add-br failed"; tail -5 "$run/vireod.log"; return 1; }
    local i
    for i in $(seq 0 $((n - 1))); do
        # Pair i's two rx queues on the i-th PMD core.
        local aff="pmd-rxq-affinity=0:$((pb + i))"
        $c add-port br0 a$i type=vhost-user-client path="$run/a$i.sock" "$aff" >/dev/null
        $c add-port br0 b$i type=vhost-user-client path="$run/b$i.sock" "$aff" >/dev/null
        $c add-flow br0 "in_port=a$i,actions=output:b$i" >/dev/null
        $c add-flow br0 "in_port=b$i,actions=output:a$i" >/dev/null
    done
    local gens=()
    for i in $(seq 0 $((n - 1))); do
        "$bin/vireo-gen" --server --port0 "$run/a$i.sock" --port1 "$run/b$i.sock" --size "$size" \
            --core $((gb + i)) --trial-secs "$secs" --json "$run/gen$i.json" >"$run/gen$i.log" 2>&1 &
        gens+=($!)
    done
    local ok=1
    for g in "${gens[@]}"; do wait "$g" || ok=0; done
    $c pmd-rxq-show >"$run/pmd-rxq.txt" 2>&1
    $c pmd-stats-show >"$run/pmd-stats.txt" 2>&1
    cleanup
    python3 - "$run" "$n" "$size" "$r" "$ok" "$out/scaling.tsv" <<'PY'
import json, sys, os
run, n, size, r, ok, tsv = sys.argv[1:]
rates = []
for i in range(int(n)):
    try:
        j = json.load(open(f"{run}/gen{i}.json"))
        t = j["trial"] or j["saturation"] or j["trials"][-1]
        rates.append(t["rx_pps"] / 1e6)
    except Exception as e:
        rates.append(float("nan"))
        sys.stderr.write(f"gen{i}: {e}: " + open(f"{run}/gen{i}.log").read()[-400:] + "\n")
tot = sum(rates)
print(f"n={n} size={size} round={r} total={tot:.2f} Mpps per-gen=" + ",".join(f"{x:.2f}" for x in rates) + ("" if ok == "1" else " (a generator failed)"))
with open(tsv, "a") as f:
    f.write(f"{n}\t{size}\t{r}\t{tot:.3f}\t" + ",".join(f"{x:.3f}" for x in rates) + "\n")
PY
    { echo "== n=$n size=$size round=$r"; cat "$run/pmd-rxq.txt" "$run/pmd-stats.txt"; } >>"$out/details-$size.txt" 2>/dev/null
}

echo "cores: $(nproc); $(grep -m1 'model name' /proc/cpuinfo)"
for r in $(seq 1 "$rounds"); do
    for n in $ns; do trial "$n" "$r"; done
done
python3 - "$out/scaling.tsv" "$size" <<'PY'
import sys, statistics
rows = [l.split("\t") for l in open(sys.argv[1]) if l.split("\t")[1] == sys.argv[2]]
by = {}
for n, size, r, tot, per in rows:
    by.setdefault(int(n), []).append(float(tot))
base = statistics.median(by[min(by)]) / min(by) if by else 0
for n in sorted(by):
    v = by[n]; m = statistics.median(v)
    print(f"median n={n} size={sys.argv[2]}: {m:.2f} Mpps (min {min(v):.2f}, max {max(v):.2f}, {len(v)} rounds), {m / n:.2f} per PMD, {m / (base * n):.2f} of linear")
PY
