#!/usr/bin/env python3
"""Regenerate layer-prefixes.tsv: function-name prefix -> the kernel module (and its source directory) whose
code uses it, for naming the layer of built-in code (frames without a `[module]` tag).

Source: Debian linux-image packages (the ones used: linux-image-6.1.0-53-amd64-unsigned and
linux-image-6.1.0-53-arm64-unsigned 6.1.187-1, from deb.debian.org via `apt-get download`; arm64 brings the
SoC GPU drivers: vc4, v3d, msm, panfrost, lima, etnaviv…), each extracted with `dpkg-deb -x`; the first
argument lists their roots, comma-separated. Each module's `.ko` gives its name and
its source directory (its path under /lib/modules/<ver>/kernel/ mirrors the kernel tree: drivers/gpu/drm/i915/
i915.ko) and its functions (`nm --defined-only`, text symbols). System.map gives the built-in kernel's
functions: a prefix the built-in kernel uses as much as the module does is core code, not the module's.

A prefix is the function name up to its first `_` (`i915_`, `nvme_`), or up to its second when the first is
shared (`drm_sched_`, `intel_dp_`). It names a module when that module defines at least MIN_SYMBOLS functions
with it and at least SHARE of every module's and the built-in kernel's functions with it; a few generic words
never name a layer (STOP). Rows of CURATED (core subsystems that are built in on every kernel, so no module
shows them: the block layer, the PCI core, the clock framework...) are appended, each with the directory its
functions live in.

Built-in functions: the package's System.map when it is the real one; Debian's is a stub, so the functions
vmlinux exports, from Module.symvers of the matching linux-headers-6.1.0-53-amd64 package.

Run: python3 capture/data/gen/gen_layers.py /tmp/lh/img,/tmp/lh/img64 capture/data/layer-prefixes.tsv \
       /tmp/lh/hdr/usr/src/linux-headers-6.1.0-53-amd64/Module.symvers
"""
import collections, os, re, subprocess, sys

MIN_SYMBOLS = 10
SHARE = 0.85
STOP = {
    "get_", "set_", "do_", "init_", "exit_", "is_", "has_", "to_", "show_", "store_", "read_", "write_",
    "alloc_", "free_", "add_", "del_", "find_", "handle_", "check_", "update_", "process_", "create_",
    "destroy_", "enable_", "disable_", "reset_", "start_", "stop_", "parse_", "setup_", "probe_", "remove_",
    "open_", "close_", "release_", "send_", "recv_", "test_", "dump_", "print_", "cleanup_", "register_",
    "unregister_", "put_", "mod_", "module_", "new_", "make_", "copy_", "clear_", "wait_", "load_", "save_",
    "cb_", "irq_", "dev_", "hw_", "fw_", "the_", "calc_", "config_", "common_", "generic_", "default_",
    "debug_", "dbg_", "local_", "this_", "my_", "lookup_", "on_", "fill_", "build_", "query_", "map_",
    "unmap_", "sync_", "try_", "mark_", "match_", "validate_", "compute_", "convert_", "power_", "select_",
    "_", "x_", "s_", "u_", "v_", "p_", "e_", "lock_", "unlock_", "trace_", "perf_", "bpf_", "ops_",
}
# Modules the images above do not build (Debian leaves CONFIG_DRM_VKMS unset), so no .ko shows their prefix:
# each named by its directory's Makefile (drivers/gpu/drm/vkms/Makefile: `obj-$(CONFIG_DRM_VKMS) += vkms.o`,
# every function `vkms_`), a module row like the .ko ones (round 13: syzbot's virtual display driver, built in
# on its kernels). (prefix, module, kernel source directory)
SOURCE_MODULES = [("vkms_", "vkms", "drivers/gpu/drm/vkms")]
# Built into every kernel: no module shows them. (prefix, layer, kernel source directory)
CURATED = [
    ("cma_", "cma", "mm"), ("ioctl_", "vfs", "fs"), ("inet_", "inet", "net/ipv4"),
    ("blk_mq_", "blk-mq", "block"), ("blk_", "block", "block"), ("bio_", "block", "block"),
    ("submit_bio", "block", "block"), ("elv_", "block", "block"),
    # Round 30: block/fops.c and block/bdev.c (the block device file: blkdev_read_iter, blkdev_open…).
    ("blkdev_", "block", "block"),
    ("pci_", "pci", "drivers/pci"), ("pcie_", "pci", "drivers/pci"), ("pciehp_", "pciehp", "drivers/pci/hotplug"),
    ("clk_", "clk", "drivers/clk"), ("__clk_", "clk", "drivers/clk"),
    # round 7: Qualcomm's MSM power manager (arch/arm/mach-msm/mpm*.c) is no part of the msm DRM driver that
    # the `msm_` prefix names.
    ("msm_mpm_", "msm_mpm", "arch/arm/mach-msm"),
    ("device_", "driver core", "drivers/base"), ("driver_", "driver core", "drivers/base"),
    ("bus_", "driver core", "drivers/base"), ("__device_", "driver core", "drivers/base"),
    ("really_probe", "driver core", "drivers/base"), ("rpm_", "runtime PM", "drivers/base/power"),
    ("pm_runtime_", "runtime PM", "drivers/base/power"), ("dpm_", "system sleep (PM core)", "drivers/base/power"),
    ("kernfs_", "kernfs", "fs/kernfs"), ("sysfs_", "sysfs", "fs/sysfs"),
    ("cgroup_", "cgroup", "kernel/cgroup"), ("css_", "cgroup", "kernel/cgroup"),
    ("freezer_", "freezer", "kernel/freezer"), ("__refrigerator", "freezer", "kernel/freezer"),
    ("rtnl_", "rtnetlink", "net/core"), ("netdev_", "net core", "net/core"),
    ("tty_", "tty", "drivers/tty"), ("n_tty_", "tty", "drivers/tty"),
    ("console_", "printk/console", "kernel/printk"), ("jbd2_", "jbd2", "fs/jbd2"),
    ("ext4_", "ext4", "fs/ext4"), ("virtqueue_", "virtio", "drivers/virtio"), ("virtio_", "virtio", "drivers/virtio"),
    ("vring_", "virtio", "drivers/virtio"), ("usb_", "usb core", "drivers/usb/core"), ("hub_", "usb core", "drivers/usb/core"),
    ("mmc_", "mmc core", "drivers/mmc/core"), ("scsi_", "scsi", "drivers/scsi"),
    ("dma_fence_", "dma-buf", "drivers/dma-buf"), ("dma_resv_", "dma-buf", "drivers/dma-buf"),
    ("rpc_", "sunrpc", "net/sunrpc"), ("xprt_", "sunrpc", "net/sunrpc"), ("svc_", "sunrpc", "net/sunrpc"),
    ("xlog_", "xfs", "fs/xfs"), ("xfs_", "xfs", "fs/xfs"), ("fuse_", "fuse", "fs/fuse"),
    ("nfs_", "nfs", "fs/nfs"), ("nfs4_", "nfsv4", "fs/nfs"), ("nfsd", "nfsd", "fs/nfsd"),
    ("btrfs_", "btrfs", "fs/btrfs"), ("ceph_", "ceph", "fs/ceph"), ("cifs_", "cifs", "fs/smb/client"),
    ("smb2_", "cifs", "fs/smb/client"),
    # bcachefs (in the tree since 6.7, after the 6.1 images above): its functions and its SIX locks.
    ("bch2_", "bcachefs", "fs/bcachefs"), ("__bch2_", "bcachefs", "fs/bcachefs"),
    ("six_lock_", "bcachefs", "fs/bcachefs"), ("__six_lock_", "bcachefs", "fs/bcachefs"),
    # Round 8 (issue 38): block/genhd.c's disk registration, whose names begin with the driver core's prefix.
    ("device_add_disk", "block", "block"), ("__device_add_disk", "block", "block"),
    # Round 17: the fbdev core (drivers/video/fbdev/core/fbmem.c, fb_defio.c: fb_open, fb_compat_ioctl,
    # fb_set_var, fb_deferred_io_*), built in (CONFIG_FB=y) on the images above, so no module shows it.
    ("fb_", "fbdev", "drivers/video/fbdev/core"),
]


# Curated layers built as a module of the same name and directory where their Kconfig says tristate and the
# images' modules directory holds the .ko (kernel/fs/fuse/fuse.ko), though no module row of theirs survives
# (the curated prefix is their only one).
TRISTATE_CURATED = [("fuse", "fs/fuse")]


def nm_text(paths):
    """path -> set of text symbol names, `nm` run over many files at once."""
    found = {p: set() for p in paths}
    out = subprocess.run(["nm", "--defined-only", *paths], capture_output=True, text=True).stdout
    current = None
    for line in out.splitlines():
        if line.endswith(":") and line[:-1] in found:
            current = line[:-1]
            continue
        parts = line.split()
        if current and len(parts) == 3 and parts[1] in "Tt":
            name = parts[2].split(".")[0]
            if re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name) and not name.startswith("__pfx_"):
                found[current].add(name)
    return found


def prefixes(name):
    tokens = name.lstrip("_").split("_")
    lead = name[: len(name) - len(name.lstrip("_"))]
    if len(tokens) < 2 or not tokens[0]:
        return []
    one = lead + tokens[0] + "_"
    two = one + tokens[1] + "_" if len(tokens) > 2 and tokens[1] else None
    return [p for p in (one, two) if p]


def modules_dir(root):
    """<root>/lib/modules/<ver>/kernel of an extracted linux-image package."""
    found = None
    for dirpath, _, _ in os.walk(root):
        if dirpath.endswith("/kernel") and "/lib/modules/" in dirpath:
            if found is None or len(dirpath) < len(found):
                found = dirpath
    if found is None:
        sys.exit("no lib/modules/<ver>/kernel under " + root)
    return found


def main(root, out_path, symvers=None):
    counts = collections.defaultdict(collections.Counter)  # prefix -> module -> n
    where = {}
    kos = []
    for mods in map(modules_dir, root.split(",")):
      for dirpath, _, files in os.walk(mods):
        for f in files:
            if f.endswith(".ko"):
                module = f[:-3].replace("-", "_")
                where[module] = os.path.relpath(dirpath, mods)
                kos.append((module, os.path.join(dirpath, f)))
    root = root.split(",")[0]
    for i in range(0, len(kos), 200):
        batch = kos[i : i + 200]
        found = nm_text([path for _, path in batch])
        for module, path in batch:
            for name in found[path]:
                for p in prefixes(name):
                    counts[p][module] += 1
    # The built-in kernel's functions: System.map when the package has the real one (Debian ships a stub and
    # puts it in -dbg), else the functions vmlinux exports (Module.symvers of the matching linux-headers
    # package, given as the third argument).
    builtin = collections.Counter()
    smap = [os.path.join(root, "boot", f) for f in os.listdir(os.path.join(root, "boot")) if f.startswith("System.map")]
    for line in open(smap[0]) if smap else []:
        parts = line.split()
        if len(parts) == 3 and parts[1] in "Tt":
            for p in prefixes(parts[2].split(".")[0]):
                builtin[p] += 1
    if symvers:
        for line in open(symvers):
            parts = line.split()
            if len(parts) >= 3 and parts[2] == "vmlinux":
                for p in prefixes(parts[1]):
                    builtin[p] += 1
    rows = {}
    for p, per in counts.items():
        if p in STOP or len(p.strip("_")) < 2:
            continue
        module, n = per.most_common(1)[0]
        total = sum(per.values()) + builtin[p]
        # A prefix the built-in kernel uses too (cma_ of mm/cma.c and of rdma_cm) names no module.
        if builtin[p] * 20 > n:
            continue
        if n >= MIN_SYMBOLS and n >= SHARE * total:
            rows[p] = (module, where[module], f"ko:{n}/{total}")
            continue
        # Modules of one directory share prefixes (drm and drm_kms_helper, nvme and nvme_core): the directory
        # is the layer, named by its module with the most of them.
        by_dir = collections.Counter()
        for m, k in per.items():
            by_dir[where[m]] += k
        d, k = by_dir.most_common(1)[0]
        if k >= MIN_SYMBOLS and k >= SHARE * total:
            lead = max((m for m in per if where[m] == d), key=lambda m: per[m])
            rows[p] = (lead, d, f"dir:{k}/{total}")
    # A two-token prefix only where its one-token prefix names no module or another one.
    for p in list(rows):
        one = prefixes(p.rstrip("_") + "_x")[0]
        if one != p and one in rows and rows[one][0] == rows[p][0]:
            del rows[p]
    # Curated rows are the word on core code: they override a module that happens to share the prefix.
    # A curated layer that module-backed rows above name with the same directory (ext4: `__ext4_` from
    # ext4.ko in fs/ext4) is a module where it is built in too: "curated:ko" (round 14: a built-in ext4
    # stack reads as a modular one).
    backed = {(m, d) for m, d, ev in rows.values() if ev.startswith(("ko:", "dir:"))}
    # Round 16: a curated layer whose Kconfig symbol is tristate and which the images build as a module of that
    # name, its every prefix taken by the curated rows (fuse.ko: fs/fuse/Kconfig `FUSE_FS` tristate), is
    # module-backed too (a WSL kernel builds FUSE in, and its stacks carry no `[fuse]` tag).
    backed |= set(TRISTATE_CURATED)
    for p, layer, d in CURATED:
        rows[p] = (layer, d, "curated:ko" if (layer, d) in backed else "curated")
    # Modules the images do not build, named by their directory's Makefile: module rows like the .ko ones.
    for p, m, d in SOURCE_MODULES:
        rows.setdefault(p, (m, d, f"src:{d}/Makefile"))
    with open(out_path, "w") as out:
        out.write("# generated by capture/data/gen/gen_layers.py from linux-image-6.1.0-53-{amd64,arm64}-unsigned 6.1.187-1 "
                  "(module .ko symbols and paths, Module.symvers exports of vmlinux) and its CURATED core rows; do not edit\n")
        out.write("prefix\tlayer\tdir\tevidence\n")
        for p in sorted(rows, key=lambda p: (-len(p), p)):
            m, d, ev = rows[p]
            out.write(f"{p}\t{m}\t{d}\t{ev}\n")
    print(len(rows), "rows")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
