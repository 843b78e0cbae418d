//! NVIDIA deep decode: what a wedged ioctl's argument struct says (RM control command, object class,
//! handles, sizes) and which locks the command takes.
//!
//! Map:
//! - Tables generated from open-gpu-kernel-modules by `data/gen/gen_nvidia_rm.py` (each names its commit
//!   and driver version): `data/nvidia-rm-controls.tsv` (control commands with their RMCTRL_FLAGS),
//!   `data/nvidia-rm-classes.tsv`, `data/nvidia-escapes.tsv`, `data/nvidia-uvm-commands.tsv` (params sizes).
//!   [`control`], [`control_name`] (falls back to the cmd's bit layout), [`class_name`], [`escape_name`],
//!   [`uvm_command`], [`lock_summary`].
//! - [`decode_rm_argument`] / [`decode_uvm_argument`]: pure decoders `fn(&[u8]) -> Result<IoctlArgument, String>` for the
//!   escape structs (NVOS54 control, NVOS21/NVOS64 alloc, NVOS00 free, NVOS02 alloc memory) and the
//!   `NV_ESC_IOCTL_XFER_CMD` indirection ([`Xfer`]), and for UVM `*_PARAMS`. The error is the reason
//!   (too short, unknown escape), never a guess. Each escape struct is a row of `LAYOUTS` (escape, struct,
//!   size, and its fields as (name, offset, width, kind), from `nv-ioctl.h`/`nvos.h`); one reader puts each
//!   field where its kind says (`Field::fill`). A UVM command's `rmStatus` offset comes from the generated
//!   UVM table and is read by the same reader. A new escape struct is a new row.
//!
//! The bytes come from the target's memory at the ioctl's pointer, read by the agent in a sacrificial
//! child (never here: `mem` takes the target's mmap lock). While the thread is inside the driver the
//! user-space struct still holds the inputs; the driver copies the outputs back only on return, so a
//! `status` read here is whatever user space left there (usually 0), not the driver's answer.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::hex::u32_hex as hex;
use super::table::Table;
use crate::le::{u32_at, u64_at};

const CONTROLS_TSV: Table = Table::new(include_str!("../../data/nvidia-rm-controls.tsv"), "cmd");
const CLASSES_TSV: Table = Table::new(include_str!("../../data/nvidia-rm-classes.tsv"), "class");
const ESCAPES_TSV: Table = Table::new(include_str!("../../data/nvidia-escapes.tsv"), "nr");
const UVM_TSV: Table = Table::new(include_str!("../../data/nvidia-uvm-commands.tsv"), "cmd");

/// The escape numbers (`_IOC_NR`) whose structs are decoded.
pub const NV_ESC_RM_ALLOC_MEMORY: u32 = 0x27;
pub const NV_ESC_RM_FREE: u32 = 0x29;
pub const NV_ESC_RM_CONTROL: u32 = 0x2a;
pub const NV_ESC_RM_ALLOC: u32 = 0x2b;
pub const NV_ESC_IOCTL_XFER_CMD: u32 = 0xd3;
/// `nv_ioctl_xfer_t`: `{u32 cmd; u32 size; u64 ptr}`.
pub const XFER_SIZE: usize = 16;
/// `NV_ABSOLUTE_MAX_IOCTL_SIZE`: the driver refuses a larger XFER size, so no more is ever read.
pub const MAX_XFER_PARAMS: usize = 16384;

/// RMCTRL_FLAGS bits that say which locks a control takes (`rmapi/control.h`).
pub const RMCTRL_FLAGS_NO_GPUS_LOCK: u32 = 0x1;
pub const RMCTRL_FLAGS_GPU_LOCK_DEVICE_ONLY: u32 = 0x10;
pub const RMCTRL_FLAGS_ROUTE_TO_PHYSICAL: u32 = 0x40;
pub const RMCTRL_FLAGS_API_LOCK_READONLY: u32 = 0x100;
pub const RMCTRL_FLAGS_NO_API_LOCK: u32 = 0x400000;

/// One control command of the generated table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlCmd {
    pub cmd: u32,
    pub name: &'static str,
    /// RMCTRL_FLAGS from the exported-method table; None when no table of this driver exports it.
    pub flags: Option<u32>,
    /// The flag bits by name, e.g. `NON_PRIVILEGED,API_LOCK_READONLY`.
    pub flag_names: &'static str,
    pub params: &'static str,
}

/// One UVM command of the generated table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UvmCmd {
    pub cmd: u32,
    pub name: &'static str,
    /// sizeof(`<name>_PARAMS`) and offsetof(rmStatus); None when the header has no such struct.
    pub params_size: Option<u32>,
    pub rm_status_offset: Option<u32>,
}

struct Tables {
    controls: HashMap<u32, ControlCmd>,
    classes: HashMap<u32, &'static str>,
    escapes: HashMap<u32, &'static str>,
    uvm: HashMap<u32, UvmCmd>,
}

fn load() -> Tables {
    let mut t = Tables {
        controls: HashMap::new(),
        classes: HashMap::new(),
        escapes: HashMap::new(),
        uvm: HashMap::new(),
    };
    for c in CONTROLS_TSV.rows(5) {
        let Some(cmd) = hex(c[0]) else { continue };
        t.controls.entry(cmd).or_insert(ControlCmd {
            cmd,
            name: c[1],
            flags: hex(c[2]),
            flag_names: c[3],
            params: c[4],
        });
    }
    for c in CLASSES_TSV.rows(2) {
        if let Some(class) = hex(c[0]) {
            t.classes.entry(class).or_insert(c[1]);
        }
    }
    for c in ESCAPES_TSV.rows(2) {
        if let Some(nr) = hex(c[0]) {
            t.escapes.entry(nr).or_insert(c[1]);
        }
    }
    for c in UVM_TSV.rows(4) {
        let Some(cmd) = hex(c[0]) else { continue };
        t.uvm.entry(cmd).or_insert(UvmCmd {
            cmd,
            name: c[1],
            params_size: c[2].parse().ok(),
            rm_status_offset: c[3].parse().ok(),
        });
    }
    t
}

fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(load)
}

/// The driver version and commit the tables were generated from (their `# source:` line).
pub fn tables_source() -> &'static str {
    CONTROLS_TSV.source()
}

pub fn control(cmd: u32) -> Option<&'static ControlCmd> {
    tables().controls.get(&cmd)
}

/// The command's name, or one built from its bit layout (class 31:16, category 13:8, index 7:0).
pub fn control_name(cmd: u32) -> String {
    match control(cmd) {
        Some(c) => c.name.to_string(),
        None => format!(
            "NV{:04X}_CTRL_CMD(category {:#04x}, index {:#04x}) (not in the {} tables)",
            cmd >> 16,
            (cmd >> 8) & 0x3f,
            cmd & 0xff,
            driver_version()
        ),
    }
}

fn driver_version() -> &'static str {
    tables_source()
        .split_whitespace()
        .nth(3)
        .unwrap_or("generated")
}

pub fn class_name(class: u32) -> Option<&'static str> {
    tables().classes.get(&class).copied()
}

pub fn escape_name(nr: u32) -> Option<&'static str> {
    tables().escapes.get(&nr).copied()
}

pub fn uvm_command(cmd: u32) -> Option<&'static UvmCmd> {
    tables().uvm.get(&cmd)
}

/// What the flags say about locks: "takes the API lock read-only + GPU lock (device only)".
pub fn lock_summary(flags: u32) -> String {
    let api = if flags & RMCTRL_FLAGS_NO_API_LOCK != 0 {
        "no API lock"
    } else if flags & RMCTRL_FLAGS_API_LOCK_READONLY != 0 {
        "the API lock read-only"
    } else {
        "the API lock read-write"
    };
    let gpu = if flags & RMCTRL_FLAGS_NO_GPUS_LOCK != 0 {
        "no GPU lock"
    } else if flags & RMCTRL_FLAGS_GPU_LOCK_DEVICE_ONLY != 0 {
        "GPU lock (device only)"
    } else {
        "GPU locks (all GPUs)"
    };
    let route = if flags & RMCTRL_FLAGS_ROUTE_TO_PHYSICAL != 0 {
        "; routed to GSP/physical RM"
    } else {
        ""
    };
    format!("takes {api} + {gpu}{route}")
}

/// The `nv_ioctl_xfer_t` of an `NV_ESC_IOCTL_XFER_CMD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Xfer {
    /// The real escape number.
    pub cmd: u32,
    pub size: u32,
    /// Where the real struct is in the target's memory.
    pub ptr: u64,
}

impl Xfer {
    pub fn parse(bytes: &[u8]) -> Result<Xfer, String> {
        if bytes.len() < XFER_SIZE {
            return Err(short("nv_ioctl_xfer_t", XFER_SIZE, bytes.len()));
        }
        Ok(Xfer {
            cmd: u32_at(bytes, 0),
            size: u32_at(bytes, 4),
            ptr: u64_at(bytes, 8),
        })
    }
}

/// The decoded argument of a wedged ioctl (`ioctl.argument` in the capture contract).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoctlArgument {
    /// The pointer read (the ioctl's third argument), `0x…`.
    pub pointer: String,
    /// The struct decoded, e.g. `NVOS54_PARAMETERS`, `UVM_MIGRATE_PARAMS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structure: Option<String>,
    /// The `NV_ESC_IOCTL_XFER_CMD` indirection followed to reach the struct.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xfer: Option<Xfer>,
    /// The escape the struct belongs to (the XFER's inner one when there is one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escape: Option<String>,
    /// Handles by their field name (hClient, hObject, hRoot, hObjectParent, hObjectNew, hObjectOld), `0x…`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handles: Vec<(String, String)>,
    /// RM control command, `0x…`, its name and RMCTRL_FLAGS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_flags: Option<String>,
    /// What the flags mean: "takes the API lock read-only + GPU lock (device only)".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locks: Option<String>,
    /// The object class of an alloc, `0x…`, and its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_name: Option<String>,
    /// The params pointer and size the struct names (control/alloc), or the UVM params size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params_size: Option<u32>,
    /// The struct's flags field (NVOS54 flags, NVOS64 flags, NVOS02 allocation flags), `0x…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags: Option<String>,
    /// The status field as user space left it (the driver writes it only on return).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The UVM command's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uvm_command: Option<String>,
    /// How many bytes were read at the pointer.
    pub bytes_read: usize,
    /// The operation and what its stack waits for: "RM control NV2080_CTRL_CMD_GPU_GET_INFO_V2 waits for
    /// a GSP RPC reply (takes the API lock read-only + GPU lock (device only))" (set with the stack).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// One line: "RM control NV2080_CTRL_CMD_GPU_GET_INFO_V2 on hObject 0x… (takes …)".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Why nothing (or only part) was decoded: unreadable, timed out, too short. Never a guess.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

impl IoctlArgument {
    /// "RM control NV2080_CTRL_CMD_GPU_GET_INFO_V2", "RM alloc NV01_MEMORY_LOCAL_USER", "UVM UVM_MIGRATE";
    /// None when nothing was decoded.
    pub fn operation_name(&self) -> Option<String> {
        self.structure.as_ref()?;
        if let Some(u) = &self.uvm_command {
            return Some(format!("UVM {u}"));
        }
        if let Some(c) = &self.cmd_name {
            return Some(format!("RM control {c}"));
        }
        let class = || {
            self.class_name
                .clone()
                .or_else(|| self.class.as_ref().map(|c| format!("class {c}")))
                .unwrap_or_default()
        };
        match self.escape.as_deref()? {
            "NV_ESC_RM_ALLOC" => Some(format!("RM alloc {}", class())),
            "NV_ESC_RM_ALLOC_MEMORY" => Some(format!("RM alloc memory {}", class())),
            "NV_ESC_RM_FREE" => Some("RM free".to_string()),
            _ => None,
        }
    }

    /// An argument that could not be read or decoded, with the reason.
    pub fn unavailable(pointer: u64, reason: impl Into<String>) -> IoctlArgument {
        IoctlArgument {
            pointer: format!("{pointer:#x}"),
            unavailable: Some(reason.into()),
            ..IoctlArgument::default()
        }
    }
}

fn short(what: &str, need: usize, got: usize) -> String {
    format!("{what} needs {need} bytes, only {got} could be read (truncated: nothing decoded)")
}

/// How wide a field is (little-endian LP64, as on x86_64 and aarch64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Width {
    U32,
    U64,
}

/// What a field says, and so where it goes in the [`IoctlArgument`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldKind {
    /// An RM handle (`handles`, by the field's name).
    Handle,
    /// The RM control command (`cmd`, its name, lock flags and locks).
    Cmd,
    /// The object class of an alloc (`class`, its name).
    Class,
    /// The struct's flags field.
    Flags,
    /// The params pointer (`params`).
    Params,
    /// The params size (`params_size`).
    ParamsSize,
    /// The status as user space left it.
    Status,
    /// Read for the summary only (NVOS02's `limit`).
    Summary,
}

/// One field of an escape struct: (name, offset, width, kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Field {
    name: &'static str,
    offset: usize,
    width: Width,
    kind: FieldKind,
}

const fn field(name: &'static str, offset: usize, width: Width, kind: FieldKind) -> Field {
    Field {
        name,
        offset,
        width,
        kind,
    }
}

/// The one-line summary's wording, per struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Summary {
    Control,
    Alloc,
    AllocMemory,
    Free,
    Xfer,
}

/// The struct of one RM escape: the driver's layout (`nv-ioctl.h`, `nvos.h`), field by field.
#[derive(Debug)]
struct Layout {
    /// The escape (`_IOC_NR`).
    nr: u32,
    /// The ioctl size that picks this struct when the escape has two (NV_ESC_RM_ALLOC: NVOS64 at 48 bytes).
    ioctl_size: Option<u32>,
    structure: &'static str,
    size: usize,
    /// The fields in groups (structs that share a head share its group).
    fields: &'static [&'static [Field]],
    summary: Summary,
}

/// The head of every struct that makes an object: `hRoot`, `hObjectParent`, `hObjectNew`, `hClass`.
const NEW_OBJECT: &[Field] = &[
    field("hRoot", 0, U32, Handle),
    field("hObjectParent", 4, U32, Handle),
    field("hObjectNew", 8, U32, Handle),
    field("hClass", 12, U32, Class),
];

use FieldKind::{Class, Cmd, Flags, Handle, Params, ParamsSize, Status};
use Width::{U32, U64};

/// Every RM escape struct decoded, first match wins (NVOS64 before NVOS21).
const LAYOUTS: &[Layout] = &[
    Layout {
        nr: NV_ESC_RM_CONTROL,
        ioctl_size: None,
        structure: "NVOS54_PARAMETERS",
        size: 32,
        fields: &[&[
            field("hClient", 0, U32, Handle),
            field("hObject", 4, U32, Handle),
            field("cmd", 8, U32, Cmd),
            field("flags", 12, U32, Flags),
            field("params", 16, U64, Params),
            field("paramsSize", 24, U32, ParamsSize),
            field("status", 28, U32, Status),
        ]],
        summary: Summary::Control,
    },
    Layout {
        nr: NV_ESC_RM_ALLOC,
        ioctl_size: Some(48),
        structure: "NVOS64_PARAMETERS",
        size: 48,
        fields: &[
            NEW_OBJECT,
            &[
                field("pAllocParms", 16, U64, Params),
                field("paramsSize", 32, U32, ParamsSize),
                field("flags", 36, U32, Flags),
                field("status", 40, U32, Status),
            ],
        ],
        summary: Summary::Alloc,
    },
    Layout {
        nr: NV_ESC_RM_ALLOC,
        ioctl_size: None,
        structure: "NVOS21_PARAMETERS",
        size: 32,
        fields: &[
            NEW_OBJECT,
            &[
                field("pAllocParms", 16, U64, Params),
                field("paramsSize", 24, U32, ParamsSize),
                field("status", 28, U32, Status),
            ],
        ],
        summary: Summary::Alloc,
    },
    Layout {
        nr: NV_ESC_RM_FREE,
        ioctl_size: None,
        structure: "NVOS00_PARAMETERS",
        size: 16,
        fields: &[&[
            field("hRoot", 0, U32, Handle),
            field("hObjectParent", 4, U32, Handle),
            field("hObjectOld", 8, U32, Handle),
            field("status", 12, U32, Status),
        ]],
        summary: Summary::Free,
    },
    Layout {
        nr: NV_ESC_RM_ALLOC_MEMORY,
        ioctl_size: None,
        structure: "nv_ioctl_nvos02_parameters_with_fd",
        size: 56,
        fields: &[
            NEW_OBJECT,
            &[
                field("flags", 16, U32, Flags),
                field("pMemory", 24, U64, Params),
                field("limit", 32, U64, FieldKind::Summary),
                field("status", 40, U32, Status),
            ],
        ],
        summary: Summary::AllocMemory,
    },
    Layout {
        nr: NV_ESC_IOCTL_XFER_CMD,
        ioctl_size: None,
        structure: "nv_ioctl_xfer_t",
        size: XFER_SIZE,
        // Read whole by [`Xfer::parse`].
        fields: &[],
        summary: Summary::Xfer,
    },
];

/// The struct of RM escape `nr` as the driver picks it by the ioctl's size.
fn layout(nr: u32, ioctl_size: u32) -> Option<&'static Layout> {
    LAYOUTS
        .iter()
        .find(|l| l.nr == nr && l.ioctl_size.is_none_or(|s| s == ioctl_size))
}

impl Field {
    /// The field's value in `b` (at least the struct's size long).
    fn read(&self, b: &[u8]) -> u64 {
        match self.width {
            Width::U32 => u64::from(u32_at(b, self.offset)),
            Width::U64 => u64_at(b, self.offset),
        }
    }

    /// Puts the field's value where its kind says.
    fn fill(&self, a: &mut IoctlArgument, b: &[u8]) {
        let v = self.read(b);
        match self.kind {
            FieldKind::Handle => a.handles.push((self.name.into(), format!("{v:#x}"))),
            FieldKind::Cmd => {
                let cmd = v as u32;
                a.cmd = Some(format!("{cmd:#010x}"));
                a.cmd_name = Some(control_name(cmd));
                if let Some(c) = control(cmd) {
                    if let Some(flags) = c.flags {
                        a.lock_flags = Some(format!("{flags:#x} ({})", c.flag_names));
                        a.locks = Some(lock_summary(flags));
                    }
                }
            }
            FieldKind::Class => {
                let class = v as u32;
                a.class = Some(format!("{class:#06x}"));
                a.class_name = class_name(class).map(str::to_string);
            }
            FieldKind::Flags => a.flags = Some(format!("{v:#x}")),
            FieldKind::Params => a.params = Some(format!("{v:#x}")),
            FieldKind::ParamsSize => a.params_size = Some(v as u32),
            FieldKind::Status => a.status = Some(format!("{v:#x}")),
            FieldKind::Summary => {}
        }
    }
}

impl Layout {
    /// The value of the field named `name` (0 for a name the struct does not have).
    fn value(&self, b: &[u8], name: &str) -> u64 {
        self.fields
            .iter()
            .flat_map(|group| group.iter())
            .find(|f| f.name == name)
            .map_or(0, |f| f.read(b))
    }

    /// The one line for a decoded struct: "RM control … on hObject 0x…", "RM alloc … under hObjectParent …".
    fn summary(&self, a: &IoctlArgument, b: &[u8]) -> Result<String, String> {
        let class_text = || {
            a.class_name.clone().unwrap_or_else(|| {
                format!(
                    "class {:#06x} (not in the tables)",
                    self.value(b, "hClass") as u32
                )
            })
        };
        Ok(match self.summary {
            Summary::Control => format!(
                "RM control {} on hObject {:#x}{}",
                a.cmd_name.as_deref().unwrap_or(""),
                self.value(b, "hObject"),
                a.locks
                    .as_ref()
                    .map(|l| format!(" ({l})"))
                    .unwrap_or_default()
            ),
            Summary::Alloc => format!(
                "RM alloc {} under hObjectParent {:#x}",
                class_text(),
                self.value(b, "hObjectParent")
            ),
            Summary::AllocMemory => format!(
                "RM alloc memory {} ({} bytes at {:#x})",
                class_text(),
                self.value(b, "limit").wrapping_add(1),
                self.value(b, "pMemory")
            ),
            Summary::Free => format!("RM free of hObject {:#x}", self.value(b, "hObjectOld")),
            Summary::Xfer => {
                let x = Xfer::parse(b)?;
                format!(
                    "XFER to escape {:#x} ({}), {} bytes at {:#x}",
                    x.cmd,
                    escape_name(x.cmd).unwrap_or("unknown"),
                    x.size,
                    x.ptr
                )
            }
        })
    }
}

/// The struct size of an RM escape as the driver picks it (NV_ESC_RM_ALLOC: NVOS21 or NVOS64 by the ioctl size).
pub fn rm_struct_size(nr: u32, ioctl_size: u32) -> Option<usize> {
    layout(nr, ioctl_size).map(|l| l.size)
}

/// Decodes the struct of RM escape `nr` (after any XFER indirection; `size` is the ioctl's or the
/// XFER's size, which picks NVOS21 or NVOS64): each field of its `Layout` read into the argument, then
/// the summary. Little-endian LP64, as on x86_64 and aarch64.
pub fn decode_rm_argument(nr: u32, size: u32, bytes: &[u8]) -> Result<IoctlArgument, String> {
    let layout = layout(nr, size).ok_or_else(|| {
        format!(
            "escape {nr:#x} ({}) has no struct decoder",
            escape_name(nr).unwrap_or("unknown")
        )
    })?;
    if bytes.len() < layout.size {
        return Err(short(layout.structure, layout.size, bytes.len()));
    }
    let mut a = IoctlArgument {
        escape: escape_name(nr).map(str::to_string),
        bytes_read: bytes.len(),
        structure: Some(layout.structure.into()),
        ..IoctlArgument::default()
    };
    for f in layout.fields.iter().flat_map(|group| group.iter()) {
        f.fill(&mut a, bytes);
    }
    if layout.summary == Summary::Xfer {
        a.xfer = Some(Xfer::parse(bytes)?);
    }
    a.summary = Some(layout.summary(&a, bytes)?);
    Ok(a)
}

/// Decodes an `NV_ESC_IOCTL_XFER_CMD`: the 16-byte `nv_ioctl_xfer_t`, then the inner struct read at its ptr.
pub fn decode_xfer(xfer_bytes: &[u8], inner: &[u8]) -> Result<IoctlArgument, String> {
    let x = Xfer::parse(xfer_bytes)?;
    let mut a = decode_rm_argument(x.cmd, x.size, inner)?;
    a.xfer = Some(x);
    a.summary = a
        .summary
        .map(|s| format!("{s} (via NV_ESC_IOCTL_XFER_CMD)"));
    Ok(a)
}

/// Decodes the params of UVM command `cmd` (compared whole, not `_IOC`-encoded).
pub fn decode_uvm_argument(cmd: u32, bytes: &[u8]) -> Result<IoctlArgument, String> {
    let c = uvm_command(cmd).ok_or_else(|| format!("UVM command {cmd:#x} is not in the tables"))?;
    let mut a = IoctlArgument {
        uvm_command: Some(c.name.to_string()),
        params_size: c.params_size,
        bytes_read: bytes.len(),
        ..IoctlArgument::default()
    };
    let (Some(size), Some(status_at)) = (c.params_size, c.rm_status_offset) else {
        a.summary = Some(format!("UVM {} (params size unknown)", c.name));
        return Ok(a);
    };
    if bytes.len() < size as usize {
        return Err(short(
            &format!("{}_PARAMS", c.name),
            size as usize,
            bytes.len(),
        ));
    }
    a.structure = Some(format!("{}_PARAMS", c.name));
    field(
        "rmStatus",
        status_at as usize,
        Width::U32,
        FieldKind::Status,
    )
    .fill(&mut a, bytes);
    a.summary = Some(format!("UVM {} ({size}-byte params)", c.name));
    Ok(a)
}

/// How many bytes to read at the pointer of a UVM command (its params size; bounded).
pub fn uvm_read_size(cmd: u32) -> usize {
    uvm_command(cmd)
        .and_then(|c| c.params_size)
        .map_or(0, |s| (s as usize).min(MAX_XFER_PARAMS))
}

/// Which struct a wedged ioctl's pointer holds, from its decoded request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgumentKind {
    /// An RM escape: `_IOC_NR` and `_IOC_SIZE` of the request.
    Rm { nr: u32, size: u32 },
    /// A UVM command (the whole request word).
    Uvm { cmd: u32 },
}

impl ArgumentKind {
    /// Bytes to read at the pointer (the XFER header only, for the indirection).
    pub fn read_len(self) -> usize {
        match self {
            ArgumentKind::Rm { nr, size } => rm_struct_size(nr, size).unwrap_or(0),
            ArgumentKind::Uvm { cmd } => uvm_read_size(cmd),
        }
    }

    /// Whether the struct read is an `nv_ioctl_xfer_t` whose ptr must be followed.
    pub fn follows_xfer(self) -> bool {
        matches!(
            self,
            ArgumentKind::Rm {
                nr: NV_ESC_IOCTL_XFER_CMD,
                ..
            }
        )
    }
}

/// The inner read of an XFER: where and how much (bounded by the driver's own limit), from its header.
/// Called in the agent's forked probe child: on a 16-byte header it allocates nothing.
pub fn xfer_inner_read(xfer_bytes: &[u8]) -> Option<(u64, usize)> {
    let x = Xfer::parse(xfer_bytes).ok()?;
    let want = rm_struct_size(x.cmd, x.size).unwrap_or(x.size as usize);
    Some((x.ptr, want.min(x.size as usize).min(MAX_XFER_PARAMS)))
}

/// Decodes what was read at `pointer` (and, for an XFER, at its ptr); a failure is the reason, never a guess.
pub fn decode_argument(
    kind: ArgumentKind,
    pointer: u64,
    first: &[u8],
    inner: Option<&[u8]>,
) -> IoctlArgument {
    let decoded = match kind {
        ArgumentKind::Uvm { cmd } => decode_uvm_argument(cmd, first),
        ArgumentKind::Rm { nr, .. } if kind.follows_xfer() => match inner {
            Some(inner) => decode_xfer(first, inner),
            None => decode_rm_argument(nr, XFER_SIZE as u32, first).map(|mut a| {
                a.unavailable = Some("the XFER's inner struct was not read".into());
                a
            }),
        },
        ArgumentKind::Rm { nr, size } => decode_rm_argument(nr, size, first),
    };
    match decoded {
        Ok(mut a) => {
            a.pointer = format!("{pointer:#x}");
            a
        }
        Err(reason) => {
            let mut a = IoctlArgument::unavailable(pointer, reason);
            a.bytes_read = first.len();
            a
        }
    }
}

#[cfg(test)]
mod tests;
