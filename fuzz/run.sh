#!/usr/bin/env bash
# Runs every fuzz target for N inputs (default 10^7) over its checked-in corpus (corpus/<target>,
# which new finds are added to), on the stable toolchain without a sanitizer (the code is safe
# Rust: libFuzzer looks for panics, aborts and memory over 2 GB). A crash leaves its input in
# artifacts/<target>/ and fails the script. Prints each target's runs and seconds.
set -euo pipefail
cd "$(dirname "$0")"
runs=${1:-10000000}
targets=$(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^cep-fuzz$')
for target in $targets; do
    # Text targets take short inputs: a rules file or replay line of junk needs no more.
    case $target in rules) max_len=256 ;; replay) max_len=1024 ;; *) max_len=4096 ;; esac
    # The cores target starts a whole cluster per input (about 1,000 inputs a second): a tenth.
    target_runs=$runs
    [ "$target" = cores ] && target_runs=$(( runs / 10 > 0 ? runs / 10 : 1 ))
    start=$(date +%s)
    cargo fuzz run "$target" -s none -- -runs="$target_runs" -max_len="$max_len" -rss_limit_mb=2048 \
        -print_final_stats=1 2>"artifacts-$target.log" ||
        { tail -40 "artifacts-$target.log" >&2; echo "fuzz target $target failed" >&2; exit 1; }
    rm -f "artifacts-$target.log"
    echo "fuzz $target: $target_runs inputs in $(( $(date +%s) - start )) s, no failure"
done
