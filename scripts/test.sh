#!/usr/bin/env bash
# Runs every Vireo test: formatting, lints, unit/property/integration tests against real peers
# (testpmd, QEMU, ovs-ofctl), and a short smoke run of every fuzz target.
# Installs what is missing first (scripts/setup.sh). Run as root on Debian 12.
#   VIREO_FUZZ_SECS=N  seconds per fuzz target (default 10; 0 skips fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
# A test whose real peer (testpmd, QEMU, ovs-ofctl, Faucet, ...) is missing fails, naming the package.
export VIREO_REQUIRE_PEERS=1

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo test"
cargo test --workspace --no-fail-fast

fuzz_secs="${VIREO_FUZZ_SECS:-10}"
if [ "$fuzz_secs" != 0 ]; then
    step "fuzz smoke (${fuzz_secs}s per target)"
    bash scripts/fuzz.sh "$fuzz_secs"
fi
step "all tests passed"
