#!/usr/bin/env bash
# Installs what Vireo's build, tests and demo need on a Debian 12 machine, as root.
# Safe to run again: it installs only what is missing. Sourced by demo.sh, test.sh and bench.
#   setup.sh            build + test dependencies
#   setup.sh --bench    also OVS-DPDK and hugepages
set -euo pipefail

want_bench=0
[ "${1:-}" = "--bench" ] && want_bench=1

log() { printf '[setup] %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# Debian packages: testpmd (dpdk-dev), ovs-ofctl (openvswitch-common), QEMU and a guest kernel,
# busybox for the guest's initramfs, iproute2 for namespaces, clang runtime for fuzzing,
# iperf3/ethtool/tcpdump/iputils-ping as kernel endpoints for the kernel-port (af-packet,
# tap, internal, af-xdp) tests; openvswitch-switch (ovs-vswitchd, userspace datapath) as the
# far end of the VXLAN tunnel test and the reference in the OpenFlow capture test; tshark
# decodes the captured OpenFlow sessions of every version.
apt_pkgs=(build-essential pkg-config curl ca-certificates git python3 iproute2
          dpdk dpdk-dev openvswitch-common openvswitch-switch qemu-system-x86 busybox-static
          linux-image-amd64 cpio iperf3 ethtool tcpdump iputils-ping tshark)
[ "$want_bench" = 1 ] && apt_pkgs+=(openvswitch-switch-dpdk gnuplot-nox)

missing=()
for p in "${apt_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Rust: rustup reads rust-toolchain.toml (pinned version, rustfmt, clippy).
if ! command -v rustup >/dev/null 2>&1; then
    [ -x "$HOME/.cargo/bin/rustup" ] || {
        log "installing rustup"
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --default-toolchain none
    }
    export PATH="$HOME/.cargo/bin:$PATH"
fi
cd "$(dirname "$0")/.."
rustup show active-toolchain >/dev/null 2>&1 || rustup toolchain install "$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)"
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# OpenFlow controllers for the ofswitch tests, from PyPI, in their own venv: Faucet 1.10.12
# (pins os-ken 3.1.0) and os-ken's sample apps simple_switch (OpenFlow 1.0) and
# simple_switch_13/14/15 (1.3, 1.4, 1.5), which only the os-ken 1.4.1 wheel still ships (later
# wheels dropped the sample apps); osken-manager 3.1.0 runs them by path.
VIREO_VENV="${VIREO_VENV:-/opt/vireo-venv}"
osken_apps=(simple_switch.py simple_switch_13.py simple_switch_14.py simple_switch_15.py)
if [ ! -x "$VIREO_VENV/bin/faucet" ]; then
    venv_missing=()
    for p in python3-venv python3-dev; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || venv_missing+=("$p")
    done
    if [ "${#venv_missing[@]}" -gt 0 ]; then
        as_root apt-get update -qq
        DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${venv_missing[@]}" >/dev/null
    fi
    log "installing faucet and os-ken into $VIREO_VENV"
    as_root /usr/bin/python3 -m venv "$VIREO_VENV"
    as_root "$VIREO_VENV/bin/pip" install -q faucet==1.10.12 os-ken==3.1.0 eventlet==0.41.3
fi
apps_missing=0
for a in "${osken_apps[@]}"; do [ -f "$VIREO_VENV/apps/$a" ] || apps_missing=1; done
if [ "$apps_missing" = 1 ]; then
    log "extracting os-ken's sample apps into $VIREO_VENV/apps"
    venv_tmp="$(mktemp -d)"
    as_root "$VIREO_VENV/bin/pip" download -q --no-deps -d "$venv_tmp" os-ken==1.4.1
    as_root mkdir -p "$VIREO_VENV/apps"
    as_root "$VIREO_VENV/bin/python" -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for app in sys.argv[3:]:
    open(sys.argv[2] + "/" + app, "wb").write(z.read("os_ken/app/" + app))' \
        "$venv_tmp/os_ken-1.4.1-py3-none-any.whl" "$VIREO_VENV/apps" "${osken_apps[@]}"
    rm -rf "$venv_tmp"
fi

# Hugepages for OVS-DPDK (benchmarks only).
if [ "$want_bench" = 1 ]; then
    if [ "$(cat /proc/sys/vm/nr_hugepages)" -lt 1024 ]; then
        log "reserving 2048 hugepages"
        echo 2048 | as_root tee /proc/sys/vm/nr_hugepages >/dev/null
    fi
    mountpoint -q /dev/hugepages || { as_root mkdir -p /dev/hugepages; as_root mount -t hugetlbfs nodev /dev/hugepages; }
fi
log "ready"
