#!/usr/bin/env bash
# MAC churn next to live traffic (issue 10, item 4): a release vireod with two testpmd guests
# switched by NORMAL (1,024 circulating IPv4 flows) and a third guest offering 20,000 frames a
# second, each from a new source MAC, in alternating 3-second phases (without / with churn).
# Runs crates/vireo/tests/mac_churn.rs strict (VIREO_STRICT_RATE=1: ≥ 10,000 new MACs/s reach
# the switch and the victims keep ≥ 90% of their rate) and prints its measurements.
#   mac-churn.sh [ROUNDS]      (default 3; each round is one run of the test)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-3}"
export VIREO_STRICT_RATE=1
for r in $(seq "$rounds"); do
    echo "== round $r"
    cargo test --release -q -p vireo --test mac_churn -- --nocapture 2>&1 |
        grep -E '^(phase|victim|churning|test result)' || true
done
