//! Generates the driver-API interposer's typed wrappers (src/interpose/wrappers.rs includes the output) from
//! driver_api/driver_api.tsv: one `#[no_mangle] extern "C"` function per libcuda symbol that cuda.h declares,
//! with that symbol's exact parameter list, so every argument reaches the real function in the registers and
//! stack slots the caller put it in (x86_64 SysV and aarch64 AAPCS64 alike: the compiler lowers both sides
//! from the same C types). The table's ABI classes come from the C++ compiler (driver_api/extract.py).

use std::fmt::Write as _;
use std::path::Path;

/// Structs cuda.h passes by value, checked by hand to hold integers only (so a byte or word array of the same
/// size and alignment is passed the same way). A new one stops the build until it is checked and added.
const BY_VALUE_STRUCTS: &[(&str, usize, usize)] = &[
    // struct CUmemLocation_st { CUmemLocationType type; int id; }
    ("CUmemLocation_st", 8, 4),
    // struct CUipcMemHandle_st / CUipcEventHandle_st { char reserved[64]; }
    ("CUipcMemHandle_st", 64, 1),
    ("CUipcEventHandle_st", 64, 1),
];

struct Function {
    name: String,
    params: Vec<String>,
    abi: String,
}

fn rust_type(class: &str, structs: &mut Vec<(String, usize, usize)>) -> String {
    match class {
        "p" => "*mut c_void".to_string(),
        "i8" | "i16" | "i32" | "i64" | "u8" | "u16" | "u32" | "u64" | "f32" | "f64" => {
            class.to_string()
        }
        other => {
            let parts: Vec<&str> = other.split(':').collect();
            let known = match parts.as_slice() {
                ["struct", name, size, align] => BY_VALUE_STRUCTS.iter().find(|(n, s, a)| {
                    n == name && s.to_string() == *size && a.to_string() == *align
                }),
                _ => None,
            };
            let Some((name, size, align)) = known else {
                panic!("driver_api.tsv: parameter class {other:?} is not known to inject/build.rs: check it and add it")
            };
            if !structs.iter().any(|(n, _, _)| n == name) {
                structs.push((name.to_string(), *size, *align));
            }
            format!("ByValue_{name}")
        }
    }
}

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let table = Path::new(&manifest).join("driver_api/driver_api.tsv");
    println!("cargo:rerun-if-changed={}", table.display());
    println!("cargo:rerun-if-changed=build.rs");
    let text = std::fs::read_to_string(&table).expect("read driver_api.tsv");
    let mut structs = Vec::new();
    let mut functions: Vec<Function> = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let mut fields = line.split('\t');
        let name = fields.next().unwrap().to_string();
        let abi = fields.next().unwrap_or("").to_string();
        let params = abi
            .split(',')
            .filter(|c| !c.is_empty())
            .map(|c| rust_type(c, &mut structs))
            .collect();
        functions.push(Function { name, params, abi });
    }
    functions.sort_by(|a, b| a.name.cmp(&b.name));
    functions.dedup_by(|a, b| a.name == b.name);

    let mut out = String::new();
    let count = functions.len();
    writeln!(
        out,
        "/// Number of wrapped driver functions.\npub const COUNT: usize = {count};"
    )
    .unwrap();
    for (name, size, align) in &structs {
        let (ty, n) = match align {
            1 => ("u8", size),
            2 => ("u16", &(size / 2)),
            4 => ("u32", &(size / 4)),
            _ => ("u64", &(size / 8)),
        };
        writeln!(
            out,
            "/// `struct {name}` by value ({size} bytes, integers only).\n#[repr(C)]\n#[derive(Clone, Copy)]\npub struct ByValue_{name}(pub [{ty}; {n}]);"
        )
        .unwrap();
    }
    writeln!(out, "/// The symbols, sorted (binary search in `index_of`).\npub static NAMES: [&CStr; COUNT] = [").unwrap();
    for f in &functions {
        writeln!(out, "    c\"{}\",", f.name).unwrap();
    }
    writeln!(out, "];").unwrap();
    // Two symbols at one address are wrapped only if their parameters are passed alike.
    writeln!(out, "/// Each symbol's parameter classes as listed in driver_api.tsv.\npub static ABI: [&str; COUNT] = [").unwrap();
    for f in &functions {
        writeln!(out, "    {:?},", f.abi).unwrap();
    }
    writeln!(out, "];").unwrap();

    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("driver_api_table.rs");
    std::fs::write(dest, std::mem::take(&mut out)).unwrap();
    write_wrappers(&functions, &mut out);
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("driver_api_wrappers.rs");
    std::fs::write(dest, out).unwrap();
}

/// The wrappers (interpose/wrappers.rs includes them): one exported function per symbol, and `wrapper(index)`.
fn write_wrappers(functions: &[Function], out: &mut String) {
    for (index, f) in functions.iter().enumerate() {
        let args: Vec<String> = (0..f.params.len()).map(|i| format!("a{i}")).collect();
        let decl: Vec<String> = args
            .iter()
            .zip(&f.params)
            .map(|(a, t)| format!("{a}: {t}"))
            .collect();
        let types = f.params.join(", ");
        let call_args = args.join(", ");
        let params_struct = if f.params.is_empty() {
            "    let params: *const c_void = core::ptr::null();\n".to_string()
        } else {
            format!(
                "    #[repr(C)]\n    struct Params({types});\n    let params = Params({call_args});\n    let params: *const c_void = (&raw const params).cast();\n"
            )
        };
        let after = if f.name.starts_with("cuGetProcAddress") {
            "    // SAFETY: the arguments and result of the call just made.\n    unsafe { after_get_proc_address(a0.cast_const().cast(), a1.cast(), result) };\n"
        } else if f.name.starts_with("cuModuleUnload") || f.name.starts_with("cuLibraryUnload") {
            "    kernels_unloaded();\n"
        } else {
            ""
        };
        writeln!(
            out,
            "#[no_mangle]
pub unsafe extern \"C\" fn {name}({decl}) -> CUresult {{
    type Real = unsafe extern \"C\" fn({types}) -> CUresult;
    let real = real({index});
    if real == 0 {{
        return CUDA_ERROR_NOT_FOUND;
    }}
{params_struct}    // SAFETY: `params` is NULL or this wrapper's `Params`, the parameters of entry {index} in order.
    let token = unsafe {{ enter({index}, params) }};
    // SAFETY: `real` is the address of libcuda's {name}, whose parameters cuda.h declares as `Real`'s.
    let result = unsafe {{ core::mem::transmute::<usize, Real>(real)({call_args}) }};
{after}    exit(token, result);
    result
}}",
            name = f.name,
            decl = decl.join(", "),
        )
        .unwrap();
    }
    writeln!(out, "/// The wrapper of symbol `index`.\npub fn wrapper(index: usize) -> usize {{\n    match index {{").unwrap();
    for (index, f) in functions.iter().enumerate() {
        writeln!(out, "        {index} => {} as *const () as usize,", f.name).unwrap();
    }
    writeln!(out, "        _ => 0,\n    }}\n}}").unwrap();
}
