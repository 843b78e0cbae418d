#!/usr/bin/env bash
# The real-kernel tests on an aarch64 kernel (issue 41): cross-build wedge-capture and the test binaries for
# aarch64-unknown-linux-gnu, boot Debian's arm64 kernel under qemu-system-aarch64 (TCG, no network) with an
# initramfs holding them plus the tools the tests need (arm64 .debs from the apt registry), run them as root
# with CI=true, and report passed/failed like `cargo test`.
#
#   tests/aarch64/run.sh [--suite ci|full] [--install] [--timeout SECONDS] [--filter REGEX]
#
#   --suite      which lines of tests/aarch64/tests.txt run (ci: the subset .ci/run runs; full: all of them)
#   --install    apt-get the host packages that are missing (qemu-system-arm, gcc-aarch64-linux-gnu, ...)
#   --timeout    wall-clock bound on the VM (default 1500 s); the VM is killed past it and the run fails
#   --filter     run only the tests.txt lines whose name matches (grep -E)
#   --no-build   reuse the binaries of the previous run (target/aarch64-vm/artifacts.json) as they are
#   --script     run this shell script (busybox sh, as root) in the VM instead of the tests: debugging by hand
#
# Exit status: 0 every test passed; 1 a test failed or the VM did not finish; 2 the VM could not be built or
# started; 77 a package the registry should have is missing (the line says which).
# Work files (downloaded .debs, the initramfs, the console log, the recorded /proc wedge) go to
# target/aarch64-vm/ (WEDGE_AARCH64_WORK overrides).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
here="$repo/tests/aarch64"
work=${WEDGE_AARCH64_WORK:-$repo/target/aarch64-vm}
target=aarch64-unknown-linux-gnu
suite=ci
install=0
vm_timeout=1500
filter=.
script=
build=1
while (($#)); do
  case $1 in
    --suite) suite=$2; shift 2 ;;
    --install) install=1; shift ;;
    --timeout) vm_timeout=$2; shift 2 ;;
    --filter) filter=$2; shift 2 ;;
    --script) script=$(realpath "$2"); shift 2 ;;
    --no-build) build=0; shift ;;
    *) echo "usage: $0 [--suite ci|full] [--install] [--timeout SECONDS] [--filter REGEX] [--script FILE] [--no-build]" >&2; exit 2 ;;
  esac
done
started=$(date +%s)
say() { echo "aarch64: $*"; }
fail_start() { say "THE VM CANNOT START: $*"; exit 2; }
missing_package() { say "MISSING REGISTRY PACKAGE: $*"; exit 77; }
without_candidate() { # the packages named that apt has no version of (one apt-cache call)
  apt-cache policy "$@" 2>/dev/null | awk -v want="$*" '/^[^ ]/ {name = $1; sub(/:$/, "", name)}
    /^ *Candidate: / && $2 != "(none)" {ok[name] = 1}
    END {n = split(want, w, " "); for (i = 1; i <= n; i++) if (!(w[i] in ok)) printf "%s ", w[i]}'
}

# ---- host tools -------------------------------------------------------------------------------------------
host_packages=()
command -v qemu-system-aarch64 >/dev/null || host_packages+=(qemu-system-arm)
command -v aarch64-linux-gnu-gcc >/dev/null || host_packages+=(gcc-aarch64-linux-gnu)
[[ -e /usr/aarch64-linux-gnu/lib/crt1.o ]] || host_packages+=(libc6-dev-arm64-cross)
command -v cpio >/dev/null || host_packages+=(cpio)
command -v depmod >/dev/null || host_packages+=(kmod)
if ((${#host_packages[@]})); then
  ((install)) || fail_start "missing host packages ${host_packages[*]} (apt-get install them, or pass --install)"
  say "installing ${host_packages[*]}"
  apt-get update -qq || fail_start "apt-get update failed"
  missing=$(without_candidate "${host_packages[@]}")
  [[ -z $missing ]] || missing_package "$missing(host) not in the configured apt sources"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${host_packages[@]}" >/dev/null ||
    fail_start "apt-get install ${host_packages[*]} failed"
fi
rustup target list --installed 2>/dev/null | grep -x "$target" >/dev/null || rustup target add "$target" >/dev/null 2>&1 ||
  fail_start "the rust target $target is not installed and rustup cannot add it"

# ---- arm64 packages: the kernel, and the userland the tests run (mkfs.ext4, losetup, mount, fsfreeze, ...) --
arm_packages=(libc6 libgcc-s1 busybox-static e2fsprogs libext2fs2 libcom-err2 libblkid1 libuuid1 libss2
  util-linux mount libmount1 libsmartcols1 libselinux1 libpcre2-8-0 libcap-ng0 libudev1 libtinfo6 libsystemd0
  libaudit1 libcrypt1 zlib1g
  # /usr/bin/python3: the tests' unprivileged tenants and FIFO/mmap-lock helpers are Python.
  python3-minimal python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libexpat1 libssl3 libffi8 libbz2-1.0
  liblzma5 libuuid1)
debs="$work/debs"
if [[ ! -e $debs/.complete ]]; then
  dpkg --print-foreign-architectures | grep -x arm64 >/dev/null || { dpkg --add-architecture arm64 && apt-get update -qq; } ||
    fail_start "cannot add the arm64 architecture to apt"
  [[ -z $(without_candidate linux-image-arm64:arm64) ]] || apt-get update -qq || true
  kernel_pkg=$(apt-cache depends linux-image-arm64:arm64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*-arm64\).*/\1/p' | sed -n 1p)
  kernel_pkg=${kernel_pkg%:arm64}
  [[ -n $kernel_pkg ]] || missing_package "linux-image-arm64:arm64 (Debian's arm64 kernel) is not in the apt sources"
  missing=$(without_candidate "${arm_packages[@]/%/:arm64}")
  [[ -z $missing ]] || missing_package "$missing"
  rm -rf "$debs" && mkdir -p "$debs"
  (cd "$debs" && apt-get download -qq "$kernel_pkg:arm64" "${arm_packages[@]/%/:arm64}" 2>&1 | grep -v unsandboxed) ||
    true
  ls "$debs"/linux-image-*.deb >/dev/null 2>&1 || fail_start "apt-get download $kernel_pkg:arm64 failed"
  touch "$debs/.complete"
fi

# ---- cross build ------------------------------------------------------------------------------------------
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}
# No debug info in the test build: a fraction of the size to copy into the VM's memory, and a panic still says
# file:line.
export CARGO_PROFILE_DEV_DEBUG=0
build_started=$(date +%s)
artifacts="$work/artifacts.json"
mkdir -p "$work"
if ((build)); then
  say "cargo build --release --target $target (wedge-capture)"
  cargo build -q --release --target "$target" -p wedge-capture --bin wedge-capture ||
    fail_start "cross build of the release binary failed"
  say "cargo test --no-run --target $target (integration, capture, breadcrumb, C ABI)"
  cargo test -q --no-run --target "$target" -p wedge-capture -p capture -p breadcrumb -p wedge-breadcrumb \
    --message-format=json-render-diagnostics >"$artifacts" || fail_start "cross build of the test binaries failed"
  say "built in $(($(date +%s) - build_started)) s"
else
  [[ -s $artifacts ]] || fail_start "--no-build, but no previous build ($artifacts)"
fi

# ---- initramfs --------------------------------------------------------------------------------------------
root="$work/root"
rm -rf "$root" "$work/x"
mkdir -p "$root"/{dev,proc,sys,tmp,root,run,etc,mods,opt/wedge/cc,usr/local/bin} "$root/${repo#/}" "$work/x"
for d in "$debs"/*.deb; do dpkg-deb -x "$d" "$work/x"; done
kver=$(ls "$work/x/lib/modules")
kernel="$work/vmlinuz"
cp "$work/x/boot/vmlinuz-$kver" "$kernel"
# Userland: everything but the kernel's files and the docs.
# Left out, to keep the initramfs (unpacked by an emulated CPU at every boot) small: device trees, charset
# converters, Python's test suite.
(cd "$work/x" && tar -c --exclude=./boot --exclude=./lib/modules --exclude=./usr/lib/linux-image-\* \
  --exclude=./usr/share --exclude=./usr/lib/aarch64-linux-gnu/gconv --exclude=./usr/lib/python3.11/test \
  --exclude=./usr/lib/python3.11/\*/tests --exclude=./usr/lib/python3.11/idlelib --exclude=./usr/lib/python3.11/pydoc_data \
  --exclude=./usr/lib/python3.11/lib2to3 --exclude=./usr/lib/python3.11/ensurepip .) | tar -x -C "$root"
# Scripts' /bin/sh (no dash here): busybox.
[[ -e $root/bin/sh ]] || ln -s busybox "$root/bin/sh"
# Modules Debian builds as modules that the tests need: loop devices, ext4 (and what ext4 loads).
depmod -b "$work/x" "$kver"
: >"$root/mods/order"
for m in loop crc32c_generic ext4; do
  for f in $(modprobe -d "$work/x" -S "$kver" --show-depends "$m" | awk '$1 == "insmod" {print $2}'); do
    name=$(basename "$f")
    [[ -e $root/mods/$name ]] && continue
    cp "$f" "$root/mods/$name"
    echo "$name" >>"$root/mods/order"
  done
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
# Which tests run: tests.txt lines of this suite.
awk -v s="$suite" '!/^#/ && NF >= 3 && ($1 == s || s == "full")' "$here/tests.txt" |
  cut -d' ' -f2- | grep -E -- "$filter" >"$root/opt/wedge/tests" || fail_start "no tests.txt line matches suite $suite, filter $filter"
# The tests' binaries (those the selected lines name, and the programs they run) and the source tree at the
# host's paths: env!("CARGO_BIN_EXE_…") and CARGO_MANIFEST_DIR
# are compiled in.
python3 - "$artifacts" "$root" "$repo" <<'EOF'
import json, os, shutil, sys
artifacts, root, repo = sys.argv[1:]
wanted = {line.split()[1] for line in open(root + "/opt/wedge/tests") if line.strip()}
listed = []
for line in open(artifacts):
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    exe = m["executable"]
    dest = root + exe
    kind = m["target"]["kind"][0]
    name = m["target"]["name"] + ("" if kind == "test" else "-" + kind)
    if m["profile"]["test"] and name not in wanted:
        continue
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.copy2(exe, dest)
    if m["profile"]["test"]:
        listed.append(f'{name} {exe} {os.path.dirname(m["manifest_path"])}')
        # The C ABI test links against the cdylib and staticlib next to it.
        for lib in os.listdir(os.path.dirname(exe)):
            if lib.startswith("libwedge_breadcrumb.") and lib.endswith((".so", ".a")):
                shutil.copy2(os.path.join(os.path.dirname(exe), lib), os.path.dirname(dest))
open(root + "/opt/wedge/binaries", "w").write("\n".join(listed) + "\n")
EOF
(cd "$repo" && git ls-files -z --cached --others --exclude-standard | grep -zv '^target/' |
  tar -c --null -T - 2>/dev/null) | tar -x -C "$root/${repo#/}" 2>/dev/null || true
mkdir -p "$root/${repo#/}/target/release"
cp "$repo/target/$target/release/wedge-capture" "$root/opt/wedge/wedge-capture"
# The C ABI test compiles tests/c/writer.c at run time; the VM has no compiler, so it is built here with the
# cross compiler exactly as the test builds it, and a `cc` in the VM hands out the result (see cc-shim.sh).
deps_dir=$(python3 -c 'import json,sys,os
for l in open(sys.argv[1]):
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]=="c_abi" and m.get("executable"): print(os.path.dirname(m["executable"]))' "$artifacts" | sed -n 1p)
bc="$repo/breadcrumb"
aarch64-linux-gnu-gcc -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -I "$bc/include" "$bc/tests/c/writer.c" \
  -o "$root/opt/wedge/cc/writer-static" "$deps_dir/libwedge_breadcrumb.a" -lpthread -ldl -lm
aarch64-linux-gnu-gcc -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -I "$bc/include" "$bc/tests/c/writer.c" \
  -o "$root/opt/wedge/cc/writer-shared" -L "$deps_dir" -Wl,-rpath,"$deps_dir" -lwedge_breadcrumb -lpthread
install -m 755 "$here/cc-shim.sh" "$root/usr/local/bin/cc"
install -m 755 "$here/init.sh" "$root/init"
[[ -z $script ]] || install -m 755 "$script" "$root/opt/wedge/script.sh"
initrd="$work/initrd.cpio"
# Not compressed: an emulated CPU would take a minute to gunzip it at every boot.
(cd "$root" && find . | cpio -o -H newc --quiet >"$initrd")
say "kernel $kver; initramfs $(du -m "$initrd" | cut -f1) MiB; $(wc -l <"$root/opt/wedge/tests") test groups"

# ---- boot -------------------------------------------------------------------------------------------------
console="$work/console.log"
say "booting qemu-system-aarch64 (-M virt -cpu max,pauth-impdef=on, TCG, no network; bound ${vm_timeout} s); console: $console"
vm_started=$(date +%s)
set +e
# pauth-impdef: pointer authentication with QEMU's cheap hash instead of QARMA, several times faster under TCG.
timeout --kill-after=10 "$vm_timeout" qemu-system-aarch64 -M virt -cpu max,pauth-impdef=on -smp "${WEDGE_AARCH64_CPUS:-2}" \
  -m "${WEDGE_AARCH64_MEM:-3072}" -nographic -no-reboot -nic none -kernel "$kernel" -initrd "$initrd" \
  -append "console=ttyAMA0 panic=-1 loglevel=4" </dev/null 2>&1 | sed -u 's/\r$//' | tee "$console"
qemu_rc=${PIPESTATUS[0]}
set -e
vm_seconds=$(($(date +%s) - vm_started))

# ---- report -----------------------------------------------------------------------------------------------
python3 "$here/report.py" "$console" "$work" "$qemu_rc" "$vm_seconds" "$(($(date +%s) - started))"
