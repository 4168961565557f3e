#!/usr/bin/env bash
# Runs every fuzz target for N inputs (default 10^7) over its corpus, on the stable toolchain
# without a sanitizer (the code is safe Rust: libFuzzer looks for panics, aborts and memory over
# 2 GB). A crash leaves its input in artifacts/<target>/ and fails the script. Prints each
# target's runs and seconds.
#
# The corpora are checked in as one archive per target (seeds/<target>.tar.xz, a few hundred KB
# each, instead of thousands of files in the tree); the working corpus corpus/<target>/ is
# unpacked from it when absent and takes new finds. `run.sh --pack` minimizes every working
# corpus (cargo fuzz cmin) and writes the archives again, reproducibly (sorted, no dates), to be
# committed after a long run.
set -euo pipefail
cd "$(dirname "$0")"
targets=$(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^cep-fuzz$')

unpack() {
    local target=$1
    [ -d "corpus/$target" ] && return
    mkdir -p corpus
    [ -f "seeds/$target.tar.xz" ] || { echo "fuzz: no seeds/$target.tar.xz, starting $target empty" >&2; mkdir -p "corpus/$target"; return; }
    tar -xJf "seeds/$target.tar.xz" -C corpus
}

if [ "${1:-}" = "--pack" ]; then
    mkdir -p seeds
    for target in $targets; do
        unpack "$target"
        cargo fuzz cmin "$target" -s none 2>"artifacts-$target.log" ||
            { tail -40 "artifacts-$target.log" >&2; echo "fuzz cmin $target failed" >&2; exit 1; }
        rm -f "artifacts-$target.log"
        tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - -C corpus "$target" |
            xz -9 -T1 >"seeds/$target.tar.xz"
        echo "fuzz $target: $(find "corpus/$target" -type f | wc -l) inputs packed into seeds/$target.tar.xz ($(stat -c %s "seeds/$target.tar.xz") bytes)"
    done
    exit 0
fi

runs=${1:-10000000}
for target in $targets; do
    unpack "$target"
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
