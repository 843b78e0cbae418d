#!/bin/busybox sh
# /init of the aarch64 test VM (tests/aarch64/run.sh builds the initramfs around it). Runs as root, pid 1:
# mounts, loads the modules Debian builds as modules (loop, ext4, ...), runs every line of /opt/wedge/tests,
# then the live checks on this kernel's own hung task, and powers off. Everything it reports goes to the
# console between `@@wedge` markers, which tests/aarch64/report.py reads.
/bin/busybox mkdir -p /usr/local/busybox
/bin/busybox --install -s /usr/local/busybox
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/busybox
export HOME=/root TMPDIR=/tmp CI=true RUST_BACKTRACE=1 LANG=C.UTF-8
# TCG runs everything 10-30 times slower: the tests' waits for the agent are stretched (tests/integration/util.rs).
export WEDGE_TEST_TIME_SCALE=${WEDGE_TEST_TIME_SCALE:-8}
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
# A tmpfs on /tmp; what the initramfs put under /tmp (the source tree and test binaries at the host's paths, when
# the checkout lives under /tmp, as a CI clone may) is copied onto it first, or the mount would hide it.
mkdir -p /mnt/tmp
mount -t tmpfs -o size=75% tmp /mnt/tmp
cp -a /tmp/. /mnt/tmp/
/bin/mount --move /mnt/tmp /tmp
mkdir -p /dev/shm /dev/pts /sys/fs/cgroup
mount -t tmpfs shm /dev/shm
mount -t devpts devpts /dev/pts
mount -t cgroup2 cgroup2 /sys/fs/cgroup
ln -sf /proc/self/fd /dev/fd
hostname wedge-arm64
ip link set lo up 2>/dev/null
for m in $(cat /mods/order); do insmod "/mods/$m" || echo "@@wedge insmod $m failed"; done
echo "@@wedge kernel $(uname -r) $(uname -m) $(cat /proc/version)"
[ -r /sys/kernel/btf/vmlinux ] && echo "@@wedge btf $(wc -c </sys/kernel/btf/vmlinux) bytes"

# run.sh --script FILE: that script instead of the tests (debugging by hand).
if [ -x /opt/wedge/script.sh ]; then
  echo "@@wedge begin script"
  /opt/wedge/script.sh
  echo "@@wedge end script rc=$?"
  echo "@@wedge done"
  poweroff -f
fi

group_timeout=${GROUP_TIMEOUT:-900}
while read -r group binary args; do
  [ -n "$group" ] || continue
  set -- $(grep "^$binary " /opt/wedge/binaries | head -1)
  exe=$2 dir=$3
  echo "@@wedge begin $group"
  start=$(cut -d' ' -f1 /proc/uptime)
  if [ -z "$exe" ]; then
    echo "no test binary named $binary was built"
    rc=127
  else
    # shellcheck disable=SC2086 # args are libtest's (filters, --exact, --skip ...)
    (cd "$dir" && timeout "$group_timeout" "$exe" $args)
    rc=$?
  fi
  echo "@@wedge end $group rc=$rc seconds=$start-$(cut -d' ' -f1 /proc/uptime)"
done </opt/wedge/tests

# ---- live checks: the release binary's selftest; explain and capture on this kernel's own hung task ---------
check() { # name, rc: one libtest-shaped line, counted by report.py
  if [ "$2" = 0 ]; then echo "test live::$1 ... ok"; else echo "test live::$1 ... FAILED (rc=$2)"; fi
}
echo "@@wedge begin live"
live_start=$(cut -d' ' -f1 /proc/uptime)
wc=/opt/wedge/wedge-capture
$wc selftest --out /tmp/selftest-out
check release_selftest_passes $?

# A shell appending to a file on a frozen ext4, asleep in D (superblock write access): the wedge every GPU-side test reproduces.
mkdir -p /tmp/live/mnt
truncate -s 16M /tmp/live/fs.img
# Absolute paths: this busybox sh prefers its own applets (busybox's fsfreeze has no -f) to util-linux's.
/sbin/mkfs.ext4 -q -F /tmp/live/fs.img
loopdev=$(/sbin/losetup --find --show /tmp/live/fs.img)
/bin/mount -t ext4 "$loopdev" /tmp/live/mnt
echo before >/tmp/live/mnt/file
/sbin/fsfreeze --freeze /tmp/live/mnt
sh -c 'echo after >>/tmp/live/mnt/file' &
wedged=$!
state=
for _ in $(seq 100); do
  state=$(sed 's/.*) \(.\).*/\1/' "/proc/$wedged/stat")
  [ "$state" = D ] && break
  sleep 0.1
done
[ "$state" = D ]
check writer_on_frozen_ext4_is_in_d $?

# The recording (tests/aarch64/recordings/): what the scanner reads of the wedged thread, verbatim.
record() { # path under /proc, recording name; base64, byte for byte (wchan has no newline)
  echo "@@wedge file ${2:-frozen-ext4-append}/proc/$1"
  base64 "/proc/$1"
  echo "@@wedge endfile"
}
for f in stat status comm wchan syscall stack; do record "$wedged/$f"; done
for f in stat status comm wchan syscall stack sched schedstat; do record "$wedged/task/$wedged/$f"; done
for fd in /proc/$wedged/fd/*; do echo "@@wedge link frozen-ext4-append/proc/$wedged/fd/${fd##*/} $(readlink "$fd")"; done

$wc capture --pid "$wedged" --format json >/tmp/live/capture.json
rc=$?
cat /tmp/live/capture.json
# The shell's `>>` blocks in openat (56 on arm64; O_CREAT takes the superblock's write access), not in write.
[ $rc = 0 ] && grep -q '"state": *"D"' /tmp/live/capture.json && grep -q '"name": *"openat"' /tmp/live/capture.json
check capture_of_the_frozen_appender_says_d_in_openat $?
$wc capture --pid "$wedged"
check capture_markdown $?

$wc explain "/proc/$wedged/stack" >/tmp/live/explain-stack.md
rc=$?
cat /tmp/live/explain-stack.md
[ $rc = 0 ] && grep -qi 'frozen\|freeze\|sb_start_write\|percpu_rwsem' /tmp/live/explain-stack.md
check explain_of_the_wedged_stack_names_the_freeze $?

# sysrq w: the kernel's own dump of every blocked task, as an operator would paste it.
echo 1 >/proc/sys/kernel/sysrq
echo w >/proc/sysrq-trigger
sleep 1
dmesg >/tmp/live/dmesg.txt
$wc explain /tmp/live/dmesg.txt >/tmp/live/explain-sysrq.md
rc=$?
cat /tmp/live/explain-sysrq.md
[ $rc = 0 ] && grep -q "$wedged" /tmp/live/explain-sysrq.md
check explain_of_the_sysrq_w_dump_names_the_wedged_task $?
echo "@@wedge file frozen-ext4-append/sysrq-w.txt"
sed -n '/sysrq: Show Blocked State/,$p' /tmp/live/dmesg.txt | base64
echo "@@wedge endfile"

/sbin/fsfreeze --unfreeze /tmp/live/mnt
wait $wedged
check writer_finishes_after_thaw $?

# vfork + a FIFO nobody writes: the parent sleeps in D (waiting for its vfork child, which waits in open).
# Unprivileged in real life; no filesystem or driver involved.
mkfifo /tmp/live/fifo
python3 -c 'import os; os.posix_spawn("/bin/busybox", ["true"], {}, file_actions=[(os.POSIX_SPAWN_OPEN, 0, "/tmp/live/fifo", os.O_RDONLY, 0)])' &
vforked=$!
state=
for _ in $(seq 300); do
  state=$(sed 's/.*) \(.\).*/\1/' "/proc/$vforked/stat")
  [ "$state" = D ] && break
  sleep 0.1
done
[ "$state" = D ]
check vfork_parent_is_in_d $?
for f in stat status comm wchan syscall stack; do record "$vforked/$f" vfork-fifo; done
for f in stat status comm wchan syscall stack sched schedstat; do record "$vforked/task/$vforked/$f" vfork-fifo; done
$wc capture --pid "$vforked" --format json >/tmp/live/capture-vfork.json
rc=$?
cat /tmp/live/capture-vfork.json
[ $rc = 0 ] && grep -q '"state": *"D"' /tmp/live/capture-vfork.json
check capture_of_the_vfork_parent_says_d $?
echo >/tmp/live/fifo
wait $vforked
check vfork_parent_finishes_once_the_fifo_opens $?
/bin/umount /tmp/live/mnt
/sbin/losetup -d "$loopdev"
echo "@@wedge end live rc=0 seconds=$live_start-$(cut -d' ' -f1 /proc/uptime)"

echo "@@wedge done"
sync
poweroff -f
