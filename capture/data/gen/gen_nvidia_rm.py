#!/usr/bin/env python3
"""Regenerate the NVIDIA decode tables in capture/data/ from an open-gpu-kernel-modules checkout.

Writes, each with a '# source:' header naming the repository, commit and driver version:
- nvidia-rm-controls.tsv  control commands: every `#define NV…_CTRL_CMD_… (0x…U) /* finn: Evaluated`
  under src/common/sdk/nvidia/inc/ctrl/** (the FINN marker separates commands from field values),
  joined with the exported-method tables of src/nvidia/generated/g_*_nvoc.c for the RMCTRL_FLAGS word
  (lock flags) and the params struct; flag bit names from src/nvidia/inc/kernel/rmapi/control.h.
- nvidia-rm-classes.tsv   class ids from src/nvidia/generated/g_allclasses.h (first name per id, aliases kept).
- nvidia-escapes.tsv      NV_ESC_* numbers from nv_escape.h and nv-ioctl-numbers.h.
- nvidia-uvm-commands.tsv UVM_* commands from kernel-open/nvidia-uvm/uvm_ioctl.h with sizeof(*_PARAMS)
  and offsetof(rmStatus), computed by compiling a probe with the host's gcc (LP64: x86_64 and aarch64 agree).

Run: python3 capture/data/gen/gen_nvidia_rm.py CHECKOUT COMMIT capture/data
(CHECKOUT: a work tree, or `git archive` of the paths above; COMMIT: the commit it was taken from.)
"""
import glob, os, re, subprocess, sys, tempfile

def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        return f.read()

def version(root):
    m = re.search(r"^NVIDIA_VERSION\s*=\s*(\S+)", read(root, "version.mk"), re.M)
    return m.group(1) if m else "unknown"

def control_flags(root):
    text = read(root, "src/nvidia/inc/kernel/rmapi/control.h")
    bits = {}
    for name, value in re.findall(r"#define\s+RMCTRL_FLAGS_(\w+)\s+(0x[0-9a-fA-F]+)", text):
        v = int(value, 16)
        if v and v & (v - 1) == 0:
            bits.setdefault(v, name)
    return bits

def flag_names(flags, bits):
    return ",".join(bits[b] for b in sorted(bits) if flags & b) or "NONE"

METHOD = re.compile(
    r"/\*flags=\*/\s*(0x[0-9a-fA-F]+)u,.*?/\*methodId=\*/\s*(0x[0-9a-fA-F]+)u,\s*"
    r"/\*paramSize=\*/\s*([^\n]*?),\s*\n.*?/\*func=\*/\s*\"(\w+)\"", re.S)

def exported_methods(root):
    out = {}
    for path in sorted(glob.glob(os.path.join(root, "src/nvidia/generated/g_*_nvoc.c"))):
        text = open(path, encoding="utf-8", errors="replace").read()
        for flags, method, size, func in METHOD.findall(text):
            m = re.match(r"sizeof\((\w+)\)", size)
            out.setdefault(int(method, 16), (int(flags, 16), m.group(1) if m else "-", func))
    return out

def controls(root):
    found = {}
    pat = re.compile(r"#define\s+(NV\w*_CTRL_CMD_\w+)\s+\((0x[0-9a-fA-F]+)U?\)\s*/\*\s*finn: Evaluated")
    for path in sorted(glob.glob(os.path.join(root, "src/common/sdk/nvidia/inc/ctrl/**/*.h"), recursive=True)):
        for name, value in pat.findall(open(path, encoding="utf-8", errors="replace").read()):
            found.setdefault(int(value, 16), name)
    return found

def classes(root):
    text = read(root, "src/nvidia/generated/g_allclasses.h")
    out = {}
    for name, value, rest in re.findall(r"#define\s+(\w+)\s+\((0x[0-9a-fA-F]+)\)([^\n]*)", text):
        out.setdefault(int(value, 16), []).append(name)
    return out

def escapes(root):
    out = []
    nums = read(root, "kernel-open/common/inc/nv-ioctl-numbers.h")
    base = int(re.search(r"#define\s+NV_IOCTL_BASE\s+(\d+)", nums).group(1))
    for name, off in re.findall(r"#define\s+(NV_ESC_\w+)\s+\(NV_IOCTL_BASE\s*\+\s*(\d+)\)", nums):
        out.append((base + int(off), name, "nv-ioctl-numbers.h"))
    esc = read(root, "src/nvidia/arch/nvalloc/unix/include/nv_escape.h")
    for name, value in re.findall(r"#define\s+(NV_ESC_\w+)\s+(0x[0-9a-fA-F]+)", esc):
        out.append((int(value, 16), name, "nv_escape.h"))
    return sorted(out)

def uvm(root):
    text = read(root, "kernel-open/nvidia-uvm/uvm_ioctl.h")
    cmds = [(n, int(i)) for n, i in re.findall(r"#define\s+(UVM_\w+)\s+UVM_IOCTL_BASE\((\d+)\)", text)]
    linux = read(root, "kernel-open/nvidia-uvm/uvm_linux_ioctl.h")
    cmds += [(n, int(v, 16)) for n, v in re.findall(r"#define\s+(UVM_\w+)\s+(0x3[0-9a-fA-F]{7})\s*$", linux, re.M)]
    structs = set(re.findall(r"\}\s*(UVM_\w+_PARAMS)\s*;", text + linux))
    structs |= set(re.findall(r"typedef\s+UVM_\w+_PARAMS\s+(UVM_\w+_PARAMS)\s*;", text + linux))
    # One probe per command: a struct under a disabled #if (e.g. UVM_REGION_SET_BACKING) fails alone.
    sizes = {}
    inc = ["kernel-open/nvidia-uvm", "kernel-open/common/inc"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, _ in cmds:
            if name + "_PARAMS" not in structs:
                continue
            src, exe = os.path.join(tmp, "p.c"), os.path.join(tmp, "p")
            open(src, "w").write(
                '#include "uvm_ioctl.h"\n#include "uvm_linux_ioctl.h"\n#include <stddef.h>\n#include <stdio.h>\n'
                f'int main(void){{printf("%zu %zu", sizeof({name}_PARAMS), offsetof({name}_PARAMS, rmStatus));return 0;}}\n')
            built = subprocess.run(["gcc", "-w", "-o", exe, src] + [f"-I{os.path.join(root, i)}" for i in inc],
                                   capture_output=True)
            if built.returncode != 0:
                continue
            s, o = subprocess.run([exe], capture_output=True, text=True, check=True).stdout.split()
            sizes[name] = (int(s), int(o))
    return cmds, sizes

def main():
    root, commit, out_dir = sys.argv[1:4]
    ver = version(root)
    src = f"# source: github.com/NVIDIA/open-gpu-kernel-modules {ver} commit {commit}"
    bits = control_flags(root)
    methods = exported_methods(root)
    with open(os.path.join(out_dir, "nvidia-rm-controls.tsv"), "w") as f:
        f.write(f"{src} (ctrl/**/*.h FINN-evaluated NV*_CTRL_CMD_*; flags from generated/g_*_nvoc.c exported methods; bits from rmapi/control.h)\n")
        f.write("cmd\tname\tflags\tflag_names\tparams\timpl\n")
        for cmd, name in sorted(controls(root).items()):
            m = methods.get(cmd)
            if m:
                f.write(f"{cmd:#010x}\t{name}\t{m[0]:#x}\t{flag_names(m[0], bits)}\t{m[1]}\t{m[2]}\n")
            else:
                f.write(f"{cmd:#010x}\t{name}\t-\t-\t-\t-\n")
    with open(os.path.join(out_dir, "nvidia-rm-classes.tsv"), "w") as f:
        f.write(f"{src} (src/nvidia/generated/g_allclasses.h)\n")
        f.write("class\tname\taliases\n")
        for value, names in sorted(classes(root).items()):
            f.write(f"{value:#06x}\t{names[0]}\t{','.join(names[1:]) or '-'}\n")
    with open(os.path.join(out_dir, "nvidia-escapes.tsv"), "w") as f:
        f.write(f"{src} (kernel-open/common/inc/nv-ioctl-numbers.h, src/nvidia/arch/nvalloc/unix/include/nv_escape.h)\n")
        f.write("nr\tname\theader\n")
        for nr, name, header in escapes(root):
            f.write(f"{nr:#04x}\t{name}\t{header}\n")
    cmds, sizes = uvm(root)
    with open(os.path.join(out_dir, "nvidia-uvm-commands.tsv"), "w") as f:
        f.write(f"{src} (kernel-open/nvidia-uvm/uvm_ioctl.h, uvm_linux_ioctl.h; sizes by gcc {subprocess.run(['gcc', '-dumpfullversion'], capture_output=True, text=True).stdout.strip()} on {os.uname().machine}, LP64)\n")
        f.write("cmd\tname\tparams_size\trm_status_offset\n")
        for name, value in sorted(cmds, key=lambda c: c[1]):
            s = sizes.get(name)
            f.write(f"{value:#x}\t{name}\t{s[0] if s else '-'}\t{s[1] if s else '-'}\n")

if __name__ == "__main__":
    main()
