#!/bin/sh
# Rebuild task_states.bpf.o, the test's task_states_refused.bpf.o and task_blockers.bpf.o (checked in: the project's build needs no clang) from their sources, and
# record each source's sha256 next to its object (*.bpf.o.source-sha256), which a unit test compares with
# the source so an edit of the C without a rebuild fails `cargo test`.
#
# Usage: sh capture/bpf/gen_task_states.sh   (needs clang >= 12 and llvm-strip; Debian: clang-14 llvm)
#   CLANG=clang-14 STRIP=llvm-strip sh capture/bpf/gen_task_states.sh
#
# -target bpfel: one little-endian object for x86_64 and aarch64 (CO-RE, no arch-specific struct).
# -g then `llvm-strip -g`: the BTF and BTF.ext sections the loader needs for CO-RE stay, DWARF goes.
set -eu
dir=$(cd "$(dirname "$0")" && pwd)
clang=${CLANG:-$(command -v clang || command -v clang-14)}
strip=${STRIP:-llvm-strip}
build() { # SOURCE OUTPUT [CFLAGS...]
	src=$1
	out=$2
	shift 2
	"$clang" -target bpfel -O2 -g -Wall -Werror "$@" -c "$dir/$src" -o "$dir/$out.tmp"
	"$strip" -g "$dir/$out.tmp" -o "$dir/$out"
	rm -f "$dir/$out.tmp"
}
build task_states.bpf.c task_states.bpf.o
# Test data only (task_iter's tests): the same program without its NULL check, which the verifier refuses.
build task_states.bpf.c task_states_refused.bpf.o -DWEDGE_TEST_VERIFIER_REFUSAL
sha256sum "$dir/task_states.bpf.c" | cut -d' ' -f1 > "$dir/task_states.bpf.o.source-sha256"
# The capture-time blocker records (capture/src/blockers.rs), a program of its own: the scan never runs it.
build task_blockers.bpf.c task_blockers.bpf.o
sha256sum "$dir/task_blockers.bpf.c" | cut -d' ' -f1 > "$dir/task_blockers.bpf.o.source-sha256"
echo "built $dir/task_states.bpf.o and task_blockers.bpf.o with $("$clang" --version | head -1)"
