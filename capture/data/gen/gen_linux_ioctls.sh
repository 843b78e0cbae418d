#!/bin/sh
# Regenerate linux-ioctls.tsv: compiles a tiny C program against the installed UAPI headers
# (linux-libc-dev: linux/fs.h, asm-generic/ioctls.h via asm/ioctls.h) and prints each request word.
# DRM and KFD ioctls have their own per-driver table: gen/gen_drm_kfd_ioctls.sh -> drm-kfd-ioctls.tsv. x86_64 and aarch64 share asm-generic/ioctl.h and LP64
# struct layouts, so the words are valid for both. Run: sh capture/data/gen/gen_linux_ioctls.sh > capture/data/linux-ioctls.tsv
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/gen.c" <<'C'
#include <stdio.h>
#include <sys/ioctl.h>
#include <linux/fs.h>
#include <linux/fiemap.h>
#include <linux/fscrypt.h>
#include <linux/dma-buf.h>
#include <linux/sync_file.h>
#include <asm/ioctls.h>
#define R(name, drv, note) printf("0x%08x\t%s\t%s\t%s\n", (unsigned)(name), #name, drv, note)
int main(void) {
  R(FS_IOC_GETFLAGS, "linux-fs", "inode flags (chattr/lsattr); _IOR('f',1,long)");
  R(FS_IOC_SETFLAGS, "linux-fs", "set inode flags; takes mnt_want_write_file: blocks while the fs is frozen");
  R(FS_IOC_GETVERSION, "linux-fs", "_IOR('v',1,long)");
  R(FS_IOC_SETVERSION, "linux-fs", "_IOW('v',2,long)");
  R(FS_IOC32_GETFLAGS, "linux-fs", "32-bit compat word");
  R(FS_IOC32_SETFLAGS, "linux-fs", "32-bit compat word");
  R(FS_IOC_FIEMAP, "linux-fs", "extent map");
  R(FS_IOC_FSGETXATTR, "linux-fs", "struct fsxattr");
  R(FS_IOC_FSSETXATTR, "linux-fs", "struct fsxattr; needs write access to the mount");
  R(FS_IOC_GETFSLABEL, "linux-fs", "");
  R(FS_IOC_SETFSLABEL, "linux-fs", "");
  R(FS_IOC_GET_ENCRYPTION_POLICY, "linux-fs", "fscrypt");
  R(FS_IOC_SET_ENCRYPTION_POLICY, "linux-fs", "fscrypt");
  R(FIFREEZE, "linux-fs", "freeze the filesystem (fsfreeze -f)");
  R(FITHAW, "linux-fs", "thaw the filesystem (fsfreeze -u)");
  R(FITRIM, "linux-fs", "discard unused blocks (fstrim)");
  R(FICLONE, "linux-fs", "reflink a whole file");
  R(FICLONERANGE, "linux-fs", "reflink a range");
  R(FIDEDUPERANGE, "linux-fs", "dedupe a range");
  R(FIBMAP, "linux-fs", "logical to physical block");
  R(FIGETBSZ, "linux-fs", "block size");
  R(BLKGETSIZE64, "block", "device size in bytes");
  R(BLKSSZGET, "block", "logical sector size");
  R(BLKFLSBUF, "block", "flush buffers");
  R(BLKDISCARD, "block", "");
  R(TCGETS, "tty", "get termios");
  R(TCSETS, "tty", "set termios");
  R(TCSETSW, "tty", "set termios after draining output");
  R(TCSETSF, "tty", "set termios after draining, flush input");
  R(TCFLSH, "tty", "");
  R(TIOCSCTTY, "tty", "");
  R(TIOCGPGRP, "tty", "");
  R(TIOCSPGRP, "tty", "");
  R(TIOCOUTQ, "tty", "");
  R(TIOCGWINSZ, "tty", "get window size");
  R(TIOCSWINSZ, "tty", "set window size");
  R(TIOCGPTN, "tty", "pty number");
  R(TIOCSPTLCK, "tty", "pty lock");
  R(FIONREAD, "generic", "bytes available to read (also TIOCINQ)");
  R(FIONBIO, "generic", "set/clear non-blocking I/O");
  R(FIOASYNC, "generic", "");
  R(FIOCLEX, "generic", "set close-on-exec");
  R(FIONCLEX, "generic", "clear close-on-exec");
  R(DMA_BUF_IOCTL_SYNC, "dma-buf", "CPU access begin/end");
  R(SYNC_IOC_MERGE, "sync-file", "");
  return 0;
}
C
gcc -o "$tmp/gen" "$tmp/gen.c"
libc=$(dpkg-query -W -f='${Version}' linux-libc-dev 2>/dev/null || echo unknown)
echo "# Linux ioctl request words, computed by capture/data/gen/gen_linux_ioctls.sh with gcc on $(uname -m) from UAPI headers: linux-libc-dev $libc (linux/fs.h, asm/ioctls.h = asm-generic/ioctls.h, linux/dma-buf.h, linux/sync_file.h). DRM ioctls: drm-kfd-ioctls.tsv. Same words on aarch64 (asm-generic ioctl encoding, LP64)."
printf '# request\tname\tdriver\tnote\n'
"$tmp/gen"
