#!/usr/bin/env bash
# Vireo's main job in one command: build, start vireod with a bridge and two vhost-user ports,
# attach two virtio endpoints (DPDK testpmd's virtio-user, as a VM or container would), and show
# traffic flowing between them through the switch; then a network namespace on an af-packet
# port pinging a virtio endpoint (testpmd in icmpecho mode). Run as root on Debian 12; installs
# what is missing first. Switch PMD on core 0, testpmd on core 1.
#   DEMO_SECS=N   how long traffic runs (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
secs="${DEMO_SECS:-10}"

echo "==> building vireod and vireoctl (release)"
cargo build --release -q -p vireo
bin=target/release
run=$(mktemp -d /tmp/vireo-demo.XXXXXX)
ctl() { "$bin/vireoctl" --run-dir "$run" "$@"; }

"$bin/vireod" --run-dir "$run" --pmd-cores 0 2>"$run/vireod.log" &
vireod_pid=$!
testpmd_pid=
ns="vireo-demo-ns-$$"
veth="vdemo$$"
cleanup() {
    if [ -n "$testpmd_pid" ]; then kill "$testpmd_pid" 2>/dev/null || true; fi
    ip netns del "$ns" 2>/dev/null || true
    ip link del "$veth" 2>/dev/null || true
    kill "$vireod_pid" 2>/dev/null || true
    wait 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 100); do ctl version >/dev/null 2>&1 && break; sleep 0.05; done

echo "==> a bridge (NORMAL: MAC learning) with two vhost-user ports"
set -x
ctl add-br br0 internal=false
ctl add-port br0 vm1 type=vhost-user
ctl add-port br0 vm2 type=vhost-user
set +x

echo "==> two virtio endpoints (testpmd virtio-user on $run/vm1.sock and vm2.sock), io forwarding"
# Non-interactive testpmd quits when its stdin ends: give it one that stays open.
dpdk-testpmd --lcores '0@1,1@1' -n 1 --no-pci --no-huge -m 1024 --file-prefix="vireo-demo-$$" \
    --vdev "net_virtio_user0,mac=00:00:00:00:00:01,path=$run/vm1.sock" \
    --vdev "net_virtio_user1,mac=00:00:00:00:00:02,path=$run/vm2.sock" \
    -- --nb-cores=1 --forward-mode=io --tx-first --stats-period=0 \
       --txd=1024 --rxd=1024 --total-num-mbufs=16384 >"$run/testpmd.log" 2>&1 < <(sleep 100000) &
testpmd_pid=$!
sleep 3
ctl show
ctl pmd-stats-clear
rate() { ctl --json port-stats "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["rx_packets"])'; }
a1=$(rate vm1); b1=$(rate vm2); t1=$(date +%s.%N)
echo "==> traffic flowing for ${secs}s ..."
sleep "$secs"
a2=$(rate vm1); b2=$(rate vm2); t2=$(date +%s.%N)
ctl port-stats
ctl pmd-stats-show
ctl dump-flows br0
ctl dump-megaflows
python3 - "$a1" "$a2" "$b1" "$b2" "$t1" "$t2" <<'PY'
import sys
a1, a2, b1, b2 = map(int, sys.argv[1:5]); t = float(sys.argv[6]) - float(sys.argv[5])
va, vb = (a2 - a1) / t, (b2 - b1) / t
print(f"==> switched: vm1->vm2 {va/1e6:.2f} Mpps, vm2->vm1 {vb/1e6:.2f} Mpps, total {(va+vb)/1e6:.2f} Mpps")
if va <= 0 or vb <= 0:
    print("==> FAILED: no traffic in one direction"); sys.exit(1)
PY

echo "==> a network namespace reaching a virtio endpoint: veth $veth on an af-packet port,"
echo "    testpmd (icmpecho: answers ARP and ping) on a vhost-user port"
kill "$testpmd_pid" 2>/dev/null || true; wait "$testpmd_pid" 2>/dev/null || true
ip netns add "$ns"
ip link add "$veth" type veth peer name eth0 netns "$ns"
ip -n "$ns" addr add 10.99.0.1/24 dev eth0
ip -n "$ns" link set eth0 up
set -x
ctl add-port br0 ns1 type=af-packet ifname="$veth"
ctl add-port br0 vm3 type=vhost-user
set +x
dpdk-testpmd --lcores '0@1,1@1' -n 1 --no-pci --no-huge -m 1024 --file-prefix="vireo-demo2-$$" \
    --vdev "net_virtio_user0,mac=00:00:00:00:00:03,path=$run/vm3.sock" \
    -- --nb-cores=1 --forward-mode=icmpecho --stats-period=0 \
       --total-num-mbufs=16384 >"$run/testpmd2.log" 2>&1 < <(sleep 100000) &
testpmd_pid=$!
sleep 3
if ip netns exec "$ns" ping -c 3 -i 0.3 -W 2 10.99.0.99; then
    echo "==> namespace -> virtio endpoint: ping answered"
else
    echo "==> FAILED: the namespace got no answer from the virtio endpoint"; exit 1
fi
ctl port-stats ns1
echo "==> done (logs in $run)"
