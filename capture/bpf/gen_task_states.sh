#!/bin/sh
# Rebuild task_states.bpf.o (checked in: the project's build needs no clang) from task_states.bpf.c, and
# record the source's sha256 next to it (task_states.bpf.o.source-sha256), which a unit test compares with
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
"$clang" -target bpfel -O2 -g -Wall -Werror -c "$dir/task_states.bpf.c" -o "$dir/task_states.bpf.o.tmp"
"$strip" -g "$dir/task_states.bpf.o.tmp" -o "$dir/task_states.bpf.o"
rm -f "$dir/task_states.bpf.o.tmp"
sha256sum "$dir/task_states.bpf.c" | cut -d' ' -f1 > "$dir/task_states.bpf.o.source-sha256"
echo "built $dir/task_states.bpf.o with $("$clang" --version | head -1)"
