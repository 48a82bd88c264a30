#!/usr/bin/env bash
# Builds a tiny initramfs for test VMs: busybox (static) plus the virtio-net modules of the
# host's Debian kernel. The guest's /init reads its job from the kernel command line:
#   vireo.ip=ADDR/LEN   address for eth0
#   vireo.ping=ADDR     ping this peer (vireo.count=N times) and print VIREO-PING-OK/FAIL
#   vireo.listen=PORT   receive one TCP stream on PORT (busybox nc), print
#                       VIREO-RECV <bytes> <md5>, then VIREO-RECV-SECS <from> <to>
#                       (guest uptime when the connection was accepted and when it ended)
#   vireo.send=ADDR:PORT:N[,ADDR:PORT:N...]  send the output of `seq 1 N` over TCP to each
#                       ADDR:PORT in turn (retried while the peer is not listening yet),
#                       print VIREO-SEND-OK/FAIL ADDR
#   vireo.wait=SECS     then stay up this long answering pings (default 0)
# and powers off. Output: a gzipped cpio archive.
#   mkinitramfs.sh OUT.cpio.gz [KERNEL-VERSION]
set -euo pipefail
out=$(realpath -m "$1")
kver="${2:-$(ls /lib/modules | sort -V | tail -1)}"
moddir="/lib/modules/$kver/kernel"
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

mkdir -p "$root"/{bin,sbin,proc,sys,dev,modules,tmp}
cp /bin/busybox "$root/bin/busybox"
for app in sh mount insmod ip ping sleep cat poweroff echo grep sed tr nc seq wc md5sum cut; do
    ln -s busybox "$root/bin/$app"
done
# Load order: dependencies first.
mods="virtio/virtio_ring virtio/virtio virtio/virtio_pci_modern_dev virtio/virtio_pci_legacy_dev
      virtio/virtio_pci failover net_failover virtio_net"
for m in $mods; do
    f=$(find "$moddir" -name "$(basename "$m").ko*" | head -1)
    [ -n "$f" ] || { echo "mkinitramfs: module $m not found under $moddir" >&2; exit 1; }
    case "$f" in
        *.xz) xz -dc "$f" > "$root/modules/$(basename "$m").ko" ;;
        *.zst) zstd -dqc "$f" > "$root/modules/$(basename "$m").ko" ;;
        *) cp "$f" "$root/modules/$(basename "$m").ko" ;;
    esac
done
echo "$mods" | tr ' ' '\n' | sed -n 's|.*/||; s|^\(.\+\)$|\1|p' > "$root/modules/order"

cat > "$root/init" <<'INIT'
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover net_failover virtio_net; do
    insmod /modules/$m.ko 2>/dev/null
done
arg() { tr ' ' '\n' < /proc/cmdline | sed -n "s/^vireo\.$1=//p"; }
ip link set lo up
ip link set eth0 up
ip addr add "$(arg ip)" dev eth0
echo "VIREO-GUEST-UP $(cat /sys/class/net/eth0/address)"
peer=$(arg ping)
if [ -n "$peer" ]; then
    count=$(arg count); [ -n "$count" ] || count=3
    # The first packets may race ARP and the peer's start: try for a while.
    ok=0
    for i in 1 2 3 4 5 6 7 8 9 10; do
        if ping -c "$count" -W 2 "$peer" > /tmp/ping.log 2>&1; then ok=1; break; fi
        sleep 1
    done
    cat /tmp/ping.log
    [ "$ok" = 1 ] && echo "VIREO-PING-OK" || echo "VIREO-PING-FAIL"
fi
lport=$(arg listen)
if [ -n "$lport" ]; then
    echo "VIREO-LISTENING $lport"
    nc -l -p "$lport" -e /bin/rx-to-file
    echo "VIREO-RECV $(wc -c < /tmp/rx) $(md5sum < /tmp/rx | cut -d' ' -f1)"
    echo "VIREO-RECV-SECS $(cat /tmp/rxtime)"
fi
for send in $(arg send | tr ',' ' '); do
    to=${send%%:*}; rest=${send#*:}; sport=${rest%%:*}; n=${rest#*:}
    ok=0
    # Made first: the sender then writes as fast as TCP takes it (TSO needs a backlog).
    seq 1 "$n" > /tmp/tx
    for i in $(seq 1 60); do
        if nc "$to" "$sport" < /tmp/tx; then ok=1; break; fi
        sleep 1
    done
    [ "$ok" = 1 ] && echo "VIREO-SEND-OK $to" || echo "VIREO-SEND-FAIL $to"
done
w=$(arg wait); [ -n "$w" ] && sleep "$w"
echo "VIREO-GUEST-DONE"
poweroff -f
INIT
chmod +x "$root/init"
printf '#!/bin/sh\nread t0 _ < /proc/uptime\ncat > /tmp/rx\nread t1 _ < /proc/uptime\necho "$t0 $t1" > /tmp/rxtime\n' > "$root/bin/rx-to-file"
chmod +x "$root/bin/rx-to-file"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$out"
echo "$out"
