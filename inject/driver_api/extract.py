#!/usr/bin/env python3
"""Writes driver_api.tsv, the source data of the driver-API interposer's wrappers (inject/build.rs), from a
CUDA toolkit's cuda.h. Run by hand when a new CUDA release adds functions; the header itself is never committed.

    python3 inject/driver_api/extract.py /usr/local/cuda-13.0/include > inject/driver_api/driver_api.tsv

Every function libcuda exports under a name cuda.h declares is found by preprocessing cuda.h twice: as an
application sees it (the default names: cuMemAlloc_v2, cuMemcpyHtoDAsync_v2, ...) and as NVIDIA builds the
driver (`__CUDA_API_VERSION_INTERNAL`: the per-thread-stream `_ptsz`/`_ptds` names and the old, unversioned
ABI versions such as cuMemAlloc with an unsigned int size). Each parameter's ABI class is not parsed from the
text but asked of the C++ compiler (type traits on the declared function type), so typedef chains, enums and
handles are classified exactly as the compiler passes them: `p` pointer, `i32`/`u32`/`i64`/`u64`/`i16`/`u16`/
`i8`/`u8` integers (enums are their underlying type), `f32`/`f64`, `struct:NAME:SIZE:ALIGN` a struct by value.
"""
import os
import re
import subprocess
import sys
import tempfile

CONFIGS = {"default": [], "internal": ["-D__CUDA_API_VERSION_INTERNAL"]}
DECL = re.compile(r"(?<![\w])(static\s+inline\s+)?CUresult\s+(cu\w+)\s*\(([^;{]*?)\)\s*[;{]", re.S)

PROBE = r"""
#include <cuda.h>
#include <cstdio>
#include <type_traits>
#include <typeinfo>
#include <cxxabi.h>
template <class T> void cls() {
  if constexpr (std::is_pointer_v<T>) std::printf("p");
  else if constexpr (std::is_enum_v<T>) { using U = std::underlying_type_t<T>; cls<U>(); }
  else if constexpr (std::is_floating_point_v<T>) std::printf(sizeof(T) == 4 ? "f32" : "f64");
  else if constexpr (std::is_integral_v<T>) std::printf("%s%zu", std::is_signed_v<T> ? "i" : "u", sizeof(T) * 8);
  else if constexpr (std::is_class_v<T> || std::is_union_v<T>) {
    int status = 0;
    char *name = abi::__cxa_demangle(typeid(T).name(), nullptr, nullptr, &status);
    std::printf("struct:%s:%zu:%zu", status == 0 ? name : typeid(T).name(), sizeof(T), alignof(T));
  } else std::printf("unknown");
}
// The function's type only (decltype): nothing is called or linked.
template <class F> struct Sig;
template <class... A> struct Sig<CUresult (*)(A...)> {
  static void print(const char *name) {
    std::printf("%s\t", name);
    int i = 0;
    ((std::printf(i++ ? "," : ""), cls<A>()), ...);
    std::printf("\n");
  }
};
int main() {
@CALLS@
}
"""


def declarations(include, flags):
    text = subprocess.run(["g++", "-E", "-P", "-x", "c++", *flags, "-I", include, os.path.join(include, "cuda.h")],
                          check=True, capture_output=True, text=True).stdout
    found = {}
    for m in DECL.finditer(text):
        if m.group(1):  # static inline helpers are not exported
            continue
        found.setdefault(m.group(2), " ".join(m.group(3).split()))
    return found


def classes(include, flags, names):
    body = "\n".join(f'  Sig<decltype(&{n})>::print("{n}");' for n in sorted(names))
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "probe.cpp"), os.path.join(tmp, "probe")
        with open(src, "w") as f:
            f.write(PROBE.replace("@CALLS@", body))
        subprocess.run(["g++", "-std=c++17", "-w", *flags, "-I", include, "-o", exe, src], check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    return dict(line.split("\t", 1) for line in out.splitlines())


def main():
    include = sys.argv[1]
    version = re.search(r"#define CUDA_VERSION (\d+)", open(os.path.join(include, "cuda.h")).read()).group(1)
    rows = {}
    for config, flags in CONFIGS.items():
        decls = declarations(include, flags)
        abi = classes(include, flags, decls)
        for name, proto in decls.items():
            row = (abi[name], proto)
            # The two passes may name parameters differently; the ABI must agree.
            if name in rows and rows[name][0] != row[0]:
                sys.exit(f"{name}: two declarations differ: {rows[name]} / {row}")
            rows.setdefault(name, row)
    print(f"# Driver API functions of cuda.h (CUDA_VERSION {version}), written by extract.py: "
          "symbol, ABI class of each parameter, the declared parameters.")
    for name in sorted(rows):
        abi, proto = rows[name]
        print(f"{name}\t{abi}\t{proto}")


if __name__ == "__main__":
    main()
