#!/bin/bash
# The af-packet socket-API A/B of BENCHMARKS.md ("af-packet: recvmmsg/sendmmsg or TPACKET rings"):
# vireod with two af-packet ports (recvmmsg/sendmmsg) against DPDK testpmd io forwarding over two
# net_af_packet ports (TPACKET_V2 mmap rings), alternating, both on core 0 at SCHED_RR 1; generator
# testpmd txonly over net_af_xdp in namespace kp-ga on core 1; rate counted at namespace kp-gb.
# Usage (root): VIREO_BIN=target/release scripts/bench/afpacket-api-ab.sh ROUNDS SIZE
# Results in /tmp/kp/tpk-SIZE/results.txt (label, Mpps, load average).
ROUNDS=${1:-3}; SIZE=${2:-64}
OUT=/tmp/kp/tpk-$SIZE; rm -rf $OUT; mkdir -p $OUT
B=${VIREO_BIN:-target/release}
for s in a b; do
  ip netns del kp-g$s 2>/dev/null; ip link del kpg$s 2>/dev/null
  ip netns add kp-g$s; ip -n kp-g$s link set lo up
  S=$(echo $s | tr a-z A-Z)
  ip link add kpg$s type veth peer name kpg$S netns kp-g$s
  ip link set kpg$s up; ip -n kp-g$s link set kpg$S up
done
ip -n kp-ga addr add 10.98.0.1/24 dev kpgA; ip -n kp-gb addr add 10.98.0.2/24 dev kpgB
MAC=$(ip -n kp-gb -j link show kpgB | python3 -c 'import json,sys;print(json.load(sys.stdin)[0]["address"])')
rx() { ip -n kp-gb -j -s link show kpgB | python3 -c 'import json,sys;print(json.load(sys.stdin)[0]["stats64"]["rx"]["packets"])'; }
measure() { # $1 label
  sleep 3; local a=$(rx); local t0=$(date +%s.%N); sleep 5; local b=$(rx); local t1=$(date +%s.%N)
  python3 -c "print('$1', round(($b-$a)/($t1-$t0)/1e6,3), 'Mpps', open('/proc/loadavg').read().split()[0])" | tee -a $OUT/results.txt
}
ip netns exec kp-ga chrt -r 1 taskset -c 1 dpdk-testpmd --lcores '0@0,1@1' -n 1 --no-pci --no-huge -m 1024 --file-prefix kpgen \
  --vdev net_af_xdp0,iface=kpgA,start_queue=0,queue_count=1 -- --nb-cores=1 --forward-mode=txonly --txpkts=$((SIZE-4)) \
  --stats-period=5 --txd=1024 --rxd=1024 --total-num-mbufs=16384 --eth-peer=0,$MAC > $OUT/gen.log 2>&1 &
GEN=$!
sleep 4
for r in $(seq 1 $ROUNDS); do
  R=$OUT/vireo$r; mkdir -p $R
  chrt -r 1 taskset -c 0 $B/vireod --run-dir $R --pmd-cores 0 > $R/log 2>&1 & V=$!
  sleep 1; C="$B/vireoctl --run-dir $R"
  $C add-br br0 internal=false; $C add-port br0 p0 type=af-packet ifname=kpga; $C add-port br0 p1 type=af-packet ifname=kpgb
  $C del-flows br0; printf 'in_port=p0,actions=output:p1\nin_port=p1,actions=output:p0\n' > $R/rules; $C add-flows br0 $R/rules
  $C pmd-stats-clear; measure "r$r vireo-af-packet(recvmmsg)"; $C --json pmd-stats-show > $R/pmd.json
  kill $V; wait $V 2>/dev/null
  chrt -r 1 taskset -c 0 dpdk-testpmd --lcores '0@0,1@0' -n 1 --no-pci --no-huge -m 1024 --file-prefix kpsw \
    --vdev net_af_packet0,iface=kpga --vdev net_af_packet1,iface=kpgb -- --nb-cores=1 --forward-mode=io \
    --stats-period=5 --total-num-mbufs=16384 > $OUT/sw$r.log 2>&1 & T=$!
  measure "r$r testpmd-net_af_packet(TPACKET_V2)"
  kill $T; wait $T 2>/dev/null; rm -rf /run/dpdk/kpsw
done
kill $GEN; wait $GEN 2>/dev/null; rm -rf /run/dpdk/kpgen
for s in a b; do ip netns del kp-g$s; ip link del kpg$s 2>/dev/null; done
