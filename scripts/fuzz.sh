#!/usr/bin/env bash
# Runs every cargo-fuzz target in the repository for N seconds each (default 10), starting from
# the corpus kept in the repo. Needs a nightly toolchain; installs cargo-fuzz if missing.
#   scripts/fuzz.sh [SECONDS] [TARGET-FILTER]
#   VIREO_FUZZ_KEEP=1  run on the committed corpus itself, so new inputs are kept (long runs by
#                      hand; CI's smoke run uses a scratch copy)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
secs="${1:-10}"
filter="${2:-}"

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal >/dev/null 2>&1 || {
        echo "fuzz: no nightly toolchain and none can be installed" >&2; exit 1; }
fi
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked

# One target dir for every fuzz project: shared crates build once.
export CARGO_TARGET_DIR="$PWD/target/fuzz"
status=0
for dir in crates/*/fuzz; do
    [ -f "$dir/Cargo.toml" ] || continue
    for target in $(cargo +nightly fuzz list --fuzz-dir "$dir"); do
        case "$target" in *"$filter"*) ;; *) continue ;; esac
        corpus="$dir/corpus/$target"
        mkdir -p "$corpus"
        printf 'fuzz %-40s ' "$dir:$target"
        # Runs on a scratch copy so the smoke run does not churn the committed corpus.
        work=$(mktemp -d)
        run_dir="$work"
        if [ "${VIREO_FUZZ_KEEP:-0}" = 1 ]; then
            run_dir="$corpus"
        else
            cp -r "$corpus/." "$work/" 2>/dev/null || true
        fi
        if cargo +nightly fuzz run --fuzz-dir "$dir" "$target" "$run_dir" -- \
            -max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=1 >"$work.log" 2>&1; then
            echo "ok ($(grep -o 'stat::number_of_executed_units: [0-9]*' "$work.log" | awk '{print $2}') runs)"
        else
            echo "FAILED"; tail -30 "$work.log"; status=1
        fi
        rm -rf "$work" "$work.log"
    done
done
exit $status
