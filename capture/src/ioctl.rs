//! ioctl request decoding: `_IOC` fields, and names from three data tables.
//!
//! - `data/nvidia-ioctls.tsv` (copied from the project's reference, source header kept): NVIDIA RM escapes
//!   on `/dev/nvidiactl` and `/dev/nvidiaN` (magic `F`; the driver keys on `_IOC_NR` and `_IOC_SIZE` only,
//!   so type and dir are ignored here too), the NVKMS command on `/dev/nvidia-modeset`, and UVM commands on
//!   `/dev/nvidia-uvm` / `-tools`, which are raw integers compared whole and must NOT be `_IOC`-decoded
//!   (0x30000001 read as `_IOC` would collide with UVM_RESERVE_VA = 1).
//! - `data/linux-ioctls.tsv`: common Linux requests (FS_IOC_*, FIFREEZE, TCGETS, FIONREAD, DRM basics),
//!   computed from UAPI headers by `data/gen_linux_ioctls.sh`.
//!
//! The device node (from the fd link) decides which table applies. Unknown requests still show their
//! `_IOC` fields. Encoding (asm-generic/ioctl.h, identical on x86_64 and aarch64):
//! `dir<<30 | size<<16 | type<<8 | nr`, dir 1 = write, 2 = read.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::snapshot::IoctlInfo;

const NVIDIA_TSV: &str = include_str!("../data/nvidia-ioctls.tsv");
const LINUX_TSV: &str = include_str!("../data/linux-ioctls.tsv");

/// What the kernel's `_IOC_*` macros extract from a request word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IocFields {
    pub dir: u32,
    pub ioctl_type: u32,
    pub nr: u32,
    pub size: u32,
}

impl IocFields {
    pub fn of(request: u32) -> IocFields {
        IocFields {
            dir: request >> 30,
            ioctl_type: (request >> 8) & 0xff,
            nr: request & 0xff,
            size: (request >> 16) & 0x3fff,
        }
    }

    pub fn dir_name(&self) -> &'static str {
        match self.dir {
            0 => "none",
            1 => "write",
            2 => "read",
            _ => "read|write",
        }
    }
}

/// Which driver a device node belongs to, from its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// `/dev/nvidiactl` or `/dev/nvidiaN`: RM escapes.
    NvidiaRm,
    NvidiaUvm,
    NvidiaUvmTools,
    NvidiaModeset,
    /// `/dev/dri/*`.
    Drm,
    /// Terminals and pseudo-terminals.
    Tty,
    /// Anything else (a regular file, a socket, unknown).
    Other,
}

impl DeviceKind {
    pub fn of(path: &str) -> DeviceKind {
        let path = path.strip_suffix(" (deleted)").unwrap_or(path);
        match path {
            "/dev/nvidiactl" => DeviceKind::NvidiaRm,
            "/dev/nvidia-uvm" => DeviceKind::NvidiaUvm,
            "/dev/nvidia-uvm-tools" => DeviceKind::NvidiaUvmTools,
            "/dev/nvidia-modeset" => DeviceKind::NvidiaModeset,
            "/dev/console" | "/dev/tty" | "/dev/ptmx" => DeviceKind::Tty,
            _ => {
                if let Some(n) = path.strip_prefix("/dev/nvidia") {
                    if !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) {
                        return DeviceKind::NvidiaRm;
                    }
                }
                if path.starts_with("/dev/dri/") {
                    DeviceKind::Drm
                } else if path.starts_with("/dev/pts/") || path.starts_with("/dev/tty") {
                    DeviceKind::Tty
                } else {
                    DeviceKind::Other
                }
            }
        }
    }
}

/// A decoded request word, before it is tied to a thread's fd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    pub request: u32,
    /// `none`/`write`/`read`/`read|write`, or `raw` for UVM commands.
    pub dir: String,
    pub ioctl_type: u32,
    pub nr: u32,
    pub size: u32,
    pub name: Option<String>,
    pub driver: Option<String>,
    /// What the name does not say: indirection, size mismatches, historical numbers.
    pub note: Option<String>,
}

impl Decoded {
    /// A request named from a table, its `_IOC` fields as encoded.
    fn named(
        request: u32,
        f: IocFields,
        name: &str,
        driver: &str,
        note: Option<String>,
    ) -> Decoded {
        Decoded {
            request,
            dir: f.dir_name().into(),
            ioctl_type: f.ioctl_type,
            nr: f.nr,
            size: f.size,
            name: Some(name.to_string()),
            driver: Some(driver.to_string()),
            note,
        }
    }

    pub fn into_info(self, fd: i64, fd_target: Option<String>) -> IoctlInfo {
        IoctlInfo {
            fd,
            fd_target,
            request: format!("{:#010x}", self.request),
            dir: self.dir,
            ioctl_type: self.ioctl_type,
            nr: self.nr,
            size: self.size,
            name: self.name,
            driver: self.driver,
            note: self.note,
            argument: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NvKind {
    Rm,
    Modeset,
    Uvm,
    UvmTest,
}

#[derive(Debug)]
struct NvRow {
    kind: NvKind,
    device: &'static str,
    value: u32,
    name: &'static str,
    notes: &'static str,
    historical: bool,
    /// Parameter sizes the table lists (`size N -> request …`).
    sizes: Vec<u32>,
}

#[derive(Debug)]
struct LinuxRow {
    name: &'static str,
    driver: &'static str,
    note: &'static str,
}

struct Tables {
    rm_by_nr: HashMap<u32, Vec<NvRow>>,
    uvm_by_cmd: HashMap<u32, Vec<NvRow>>,
    modeset: Vec<NvRow>,
    linux_by_request: HashMap<u32, LinuxRow>,
    drm_by_nr: HashMap<u32, &'static str>,
}

fn parse_hex_u32(s: &str) -> Option<u32> {
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

fn sizes_in(notes: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let mut rest = notes;
    while let Some(pos) = rest.find("size ") {
        rest = &rest[pos + 5..];
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if !digits.is_empty() && rest[digits.len()..].starts_with(" -> request") {
            if let Ok(n) = digits.parse() {
                out.push(n);
            }
        }
    }
    out
}

fn load() -> Tables {
    let mut t = Tables {
        rm_by_nr: HashMap::new(),
        uvm_by_cmd: HashMap::new(),
        modeset: Vec::new(),
        linux_by_request: HashMap::new(),
        drm_by_nr: HashMap::new(),
    };
    for line in NVIDIA_TSV.lines().skip(1) {
        let cols: Vec<&'static str> = line.split('\t').collect();
        if cols.len() < 5 || cols[0] == "device" {
            continue;
        }
        let Some(value) = parse_hex_u32(cols[2]) else {
            continue;
        };
        let kind = if cols[1].starts_with("F(") {
            NvKind::Rm
        } else if cols[1].starts_with("m(") {
            NvKind::Modeset
        } else if cols[1].contains("(test)") {
            NvKind::UvmTest
        } else if cols[1].starts_with("uvm") {
            NvKind::Uvm
        } else {
            continue;
        };
        let row = NvRow {
            kind,
            device: cols[0],
            value,
            name: cols[3],
            notes: cols[4],
            historical: cols[0] == "-",
            sizes: sizes_in(cols[4]),
        };
        match kind {
            NvKind::Rm => t.rm_by_nr.entry(value).or_default().push(row),
            NvKind::Modeset => t.modeset.push(row),
            NvKind::Uvm | NvKind::UvmTest => t.uvm_by_cmd.entry(value).or_default().push(row),
        }
    }
    // Current rows before historical ones.
    for rows in t.rm_by_nr.values_mut().chain(t.uvm_by_cmd.values_mut()) {
        rows.sort_by_key(|r| r.historical);
    }
    for line in LINUX_TSV.lines() {
        if line.starts_with('#') {
            continue;
        }
        let cols: Vec<&'static str> = line.split('\t').collect();
        if cols.len() < 3 {
            continue;
        }
        let Some(request) = parse_hex_u32(cols[0]) else {
            continue;
        };
        let row = LinuxRow {
            name: cols[1],
            driver: cols[2],
            note: cols.get(3).copied().unwrap_or(""),
        };
        if row.driver == "drm" {
            t.drm_by_nr.insert(request & 0xff, row.name);
        }
        t.linux_by_request.entry(request).or_insert(row);
    }
    t
}

fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(load)
}

const XFER_NOTE: &str = "NV_ESC_IOCTL_XFER_CMD is an indirection: the real escape number is nv_ioctl_xfer_t.cmd (u32 at offset 0) inside the argument struct in the target's memory; for a wedged thread the agent reads it from <proc>/<pid>/mem in a sacrificial child with the probe deadline (ioctl.argument), never with process_vm_readv, which blocks unkillably on the target's mmap_lock";
const NVKMS_NOTE: &str = "NVKMS_IOCTL_CMD is an indirection: the real NVKMS command is NvKmsIoctlParams.cmd inside the argument struct in the target's memory, which wedge-capture does not read (it could block on the target's mmap_lock)";

fn first_clause(notes: &str) -> &str {
    notes.split(" | ").next().unwrap_or("").trim()
}

fn decode_rm(request: u32, f: IocFields, device: Option<&str>) -> Option<Decoded> {
    let device_known = device.is_some();
    let rows = tables().rm_by_nr.get(&f.nr)?;
    // Prefer a row whose listed size matches; else the first (current before historical).
    let row = rows
        .iter()
        .find(|r| r.sizes.contains(&f.size))
        .or_else(|| rows.first())?;
    let mut notes = Vec::new();
    if row.name == "NV_ESC_IOCTL_XFER_CMD" {
        notes.push(XFER_NOTE.to_string());
    }
    if !row.sizes.is_empty() && !row.sizes.contains(&f.size) {
        let array = row.notes.contains("array")
            && row.sizes.iter().any(|s| f.size.checked_rem(*s) == Some(0));
        if !array {
            notes.push(format!(
                "size {} differs from the table's {:?}: the driver would reject it (-EINVAL) or it is a different driver version",
                f.size, row.sizes
            ));
        }
    }
    if row.historical {
        notes.push(format!("historical escape: {}", row.notes));
    }
    // The validator tables accept some escapes only on the control node, others only on a GPU node.
    if let Some(dev) = device {
        let on_ctl = dev == "/dev/nvidiactl";
        if on_ctl && row.device.starts_with("/dev/nvidiaN") {
            notes.push(
                "the driver accepts this escape only on /dev/nvidiaN, not /dev/nvidiactl".into(),
            );
        } else if !on_ctl && row.device.starts_with("/dev/nvidiactl (") {
            notes.push(format!(
                "the driver accepts this escape only on /dev/nvidiactl, not {dev}"
            ));
        }
    }
    if f.ioctl_type != u32::from(b'F') {
        notes.push(format!(
            "type {:#04x} is not 'F'; the NVIDIA driver ignores type and dir and decodes only nr and size",
            f.ioctl_type
        ));
    }
    if !device_known {
        notes.push("fd device unknown: named as an NVIDIA RM escape because type is 'F' and the size matches".into());
    }
    Some(Decoded::named(
        request,
        f,
        row.name,
        "nvidia-rm",
        (!notes.is_empty()).then(|| notes.join("; ")),
    ))
}

fn decode_uvm(request: u32, kind: DeviceKind) -> Option<Decoded> {
    let rows = tables().uvm_by_cmd.get(&request)?;
    let want_tools = kind == DeviceKind::NvidiaUvmTools;
    let row = rows
        .iter()
        .find(|r| !r.historical && (r.device == "/dev/nvidia-uvm-tools") == want_tools)
        .or_else(|| rows.first())?;
    let mut notes = Vec::new();
    if row.kind == NvKind::UvmTest {
        notes.push(
            "UVM test ioctl: only routed when nvidia-uvm is loaded with uvm_enable_builtin_tests=1"
                .to_string(),
        );
    }
    if row.historical {
        notes.push(format!("historical command: {}", first_clause(row.notes)));
    } else if !row.device.is_empty() && row.device != "-" {
        let on_tools = row.device == "/dev/nvidia-uvm-tools";
        if on_tools != want_tools && kind != DeviceKind::Other {
            notes.push(format!("this command belongs to {}", row.device));
        }
    }
    if kind == DeviceKind::Other {
        notes.push(
            "fd device unknown: named as a raw UVM command (valid only on /dev/nvidia-uvm*)".into(),
        );
    }
    if row.notes.contains("mmap_lock in READ mode") {
        notes.push("holds the process's mmap_lock for read during part of its run".into());
    }
    Some(Decoded {
        request,
        dir: "raw".into(),
        ioctl_type: 0,
        nr: request,
        size: 0,
        name: Some(row.name.to_string()),
        driver: Some(
            if want_tools {
                "nvidia-uvm-tools"
            } else {
                "nvidia-uvm"
            }
            .into(),
        ),
        note: (!notes.is_empty()).then(|| notes.join("; ")),
    })
}

fn decode_modeset(request: u32, f: IocFields) -> Option<Decoded> {
    let row = tables()
        .modeset
        .iter()
        .find(|r| r.value == f.nr && f.ioctl_type == u32::from(b'm'))?;
    Some(Decoded::named(
        request,
        f,
        row.name,
        "nvidia-modeset",
        Some(NVKMS_NOTE.into()),
    ))
}

fn decode_linux(request: u32, f: IocFields, kind: DeviceKind) -> Option<Decoded> {
    let t = tables();
    let (name, driver, note) = match t.linux_by_request.get(&request) {
        Some(row) => (row.name, row.driver, row.note),
        None if kind == DeviceKind::Drm && f.ioctl_type == u32::from(b'd') => {
            let name = t.drm_by_nr.get(&f.nr)?;
            (
                *name,
                "drm",
                "matched by DRM nr; size differs from the libdrm header's",
            )
        }
        None => return None,
    };
    Some(Decoded::named(
        request,
        f,
        name,
        driver,
        (!note.is_empty()).then(|| note.to_string()),
    ))
}

/// Decodes `request` (the low 32 bits of the ioctl's second argument) for the device at `device`
/// (the fd's link target), or for an unknown device.
pub fn decode(request: u32, device: Option<&str>) -> Decoded {
    let f = IocFields::of(request);
    let kind = device.map_or(DeviceKind::Other, DeviceKind::of);
    let named = match kind {
        DeviceKind::NvidiaRm => decode_rm(request, f, device),
        DeviceKind::NvidiaUvm | DeviceKind::NvidiaUvmTools => decode_uvm(request, kind),
        DeviceKind::NvidiaModeset => decode_modeset(request, f),
        DeviceKind::Drm | DeviceKind::Tty => decode_linux(request, f, kind),
        DeviceKind::Other => decode_linux(request, f, kind).or_else(|| {
            if device.is_some() {
                return None;
            }
            // Device unknown (decode-ioctl without --device): try NVIDIA where it is unambiguous.
            let rm = (f.ioctl_type == u32::from(b'F'))
                .then(|| decode_rm(request, f, None))
                .flatten()
                .filter(|d| !d.note.as_deref().unwrap_or("").contains("differs"));
            rm.or_else(|| decode_modeset(request, f)).or_else(|| {
                (request >> 16 == 0x3000)
                    .then(|| decode_uvm(request, kind))
                    .flatten()
            })
        }),
    };
    named.unwrap_or_else(|| Decoded {
        request,
        dir: if matches!(kind, DeviceKind::NvidiaUvm | DeviceKind::NvidiaUvmTools) {
            "raw".into()
        } else {
            f.dir_name().into()
        },
        ioctl_type: f.ioctl_type,
        nr: if matches!(kind, DeviceKind::NvidiaUvm | DeviceKind::NvidiaUvmTools) {
            request
        } else {
            f.nr
        },
        size: f.size,
        name: None,
        driver: match kind {
            DeviceKind::NvidiaRm => Some("nvidia-rm".into()),
            DeviceKind::NvidiaUvm => Some("nvidia-uvm".into()),
            DeviceKind::NvidiaUvmTools => Some("nvidia-uvm-tools".into()),
            DeviceKind::NvidiaModeset => Some("nvidia-modeset".into()),
            DeviceKind::Drm => Some("drm".into()),
            DeviceKind::Tty => Some("tty".into()),
            DeviceKind::Other => None,
        },
        note: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioc_fields() {
        let f = IocFields::of(0xc020462a);
        assert_eq!((f.dir, f.ioctl_type, f.nr, f.size), (3, 0x46, 0x2a, 32));
        assert_eq!(f.dir_name(), "read|write");
        assert_eq!(IocFields::of(0x40086602).dir_name(), "write");
        assert_eq!(IocFields::of(0x80086601).dir_name(), "read");
        assert_eq!(IocFields::of(0x5401).dir_name(), "none");
    }

    #[test]
    fn device_kinds() {
        assert_eq!(DeviceKind::of("/dev/nvidiactl"), DeviceKind::NvidiaRm);
        assert_eq!(DeviceKind::of("/dev/nvidia0"), DeviceKind::NvidiaRm);
        assert_eq!(DeviceKind::of("/dev/nvidia12"), DeviceKind::NvidiaRm);
        assert_eq!(DeviceKind::of("/dev/nvidia-uvm"), DeviceKind::NvidiaUvm);
        assert_eq!(
            DeviceKind::of("/dev/nvidia-uvm-tools"),
            DeviceKind::NvidiaUvmTools
        );
        assert_eq!(
            DeviceKind::of("/dev/nvidia-modeset"),
            DeviceKind::NvidiaModeset
        );
        assert_eq!(DeviceKind::of("/dev/nvidia-caps"), DeviceKind::Other);
        assert_eq!(DeviceKind::of("/dev/dri/card0"), DeviceKind::Drm);
        assert_eq!(DeviceKind::of("/dev/pts/3"), DeviceKind::Tty);
        assert_eq!(DeviceKind::of("/mnt/x/file"), DeviceKind::Other);
    }

    #[test]
    fn rm_escapes() {
        let d = decode(0xc020462a, Some("/dev/nvidiactl"));
        assert_eq!(d.name.as_deref(), Some("NV_ESC_RM_CONTROL"));
        assert_eq!(d.driver.as_deref(), Some("nvidia-rm"));
        assert_eq!(d.note, None);
        // RM_ALLOC: two sizes.
        assert_eq!(
            decode(0xc030462b, Some("/dev/nvidiactl")).name.as_deref(),
            Some("NV_ESC_RM_ALLOC")
        );
        assert_eq!(
            decode(0xc020462b, Some("/dev/nvidia0")).name.as_deref(),
            Some("NV_ESC_RM_ALLOC")
        );
        // The driver ignores type and dir: still named, with a note.
        let d = decode(0x0020002a, Some("/dev/nvidiactl"));
        assert_eq!(d.name.as_deref(), Some("NV_ESC_RM_CONTROL"));
        assert!(d.note.unwrap().contains("ignores type"));
        // XFER indirection is said.
        let d = decode(0xc01046d3, Some("/dev/nvidiactl"));
        assert_eq!(d.name.as_deref(), Some("NV_ESC_IOCTL_XFER_CMD"));
        assert!(d.note.unwrap().contains("indirection"));
        // CARD_INFO is an array of 72-byte records.
        let d = decode(0xc09046c8, Some("/dev/nvidiactl"));
        assert_eq!(d.name.as_deref(), Some("NV_ESC_CARD_INFO"));
        assert_eq!(d.note, None);
        // Unknown nr on an NVIDIA node keeps its fields.
        let d = decode(0xc0104601, Some("/dev/nvidiactl"));
        assert_eq!(d.name, None);
        assert_eq!((d.nr, d.size, d.ioctl_type), (1, 16, 0x46));
        // Without a device, 'F' + matching size is named, with a caveat.
        let d = decode(0xc020462a, None);
        assert_eq!(d.name.as_deref(), Some("NV_ESC_RM_CONTROL"));
        assert!(d.note.unwrap().contains("device unknown"));
    }

    #[test]
    fn uvm_commands_are_compared_whole() {
        let d = decode(0x30000001, Some("/dev/nvidia-uvm"));
        assert_eq!(d.name.as_deref(), Some("UVM_INITIALIZE"));
        assert_eq!(d.dir, "raw");
        assert_eq!(d.nr, 0x30000001);
        let d = decode(0x33, Some("/dev/nvidia-uvm"));
        assert_eq!(d.name.as_deref(), Some("UVM_MIGRATE"));
        assert!(d.note.unwrap().contains("mmap_lock"));
        assert_eq!(
            decode(0x44, Some("/dev/nvidia-uvm")).name.as_deref(),
            Some("UVM_ALLOC_SEMAPHORE_POOL")
        );
        let d = decode(0x38, Some("/dev/nvidia-uvm-tools"));
        assert_eq!(d.name.as_deref(), Some("UVM_TOOLS_INIT_EVENT_TRACKER"));
        assert_eq!(d.driver.as_deref(), Some("nvidia-uvm-tools"));
        // 0x104 has a historical and a current name: the current one wins.
        assert_eq!(
            decode(0x104, Some("/dev/nvidia-uvm")).name.as_deref(),
            Some("UVM_TEST_ENABLE_STATIC_PEER_ACCESS")
        );
        // Not _IOC-decoded: FS_IOC_SETFLAGS's word means nothing to UVM.
        let d = decode(0x40086602, Some("/dev/nvidia-uvm"));
        assert_eq!(d.name, None);
        assert_eq!(d.dir, "raw");
    }

    #[test]
    fn modeset_and_linux() {
        let d = decode(0xc0106d00, Some("/dev/nvidia-modeset"));
        assert_eq!(d.name.as_deref(), Some("NVKMS_IOCTL_CMD"));
        assert!(d.note.unwrap().contains("indirection"));
        let d = decode(0x40086602, Some("/mnt/frozen/victim"));
        assert_eq!(d.name.as_deref(), Some("FS_IOC_SETFLAGS"));
        assert_eq!(d.driver.as_deref(), Some("linux-fs"));
        assert_eq!(
            (d.dir.as_str(), d.ioctl_type, d.nr, d.size),
            ("write", u32::from(b'f'), 2, 8)
        );
        assert_eq!(
            decode(0x80086601, None).name.as_deref(),
            Some("FS_IOC_GETFLAGS")
        );
        assert_eq!(decode(0xc0045877, None).name.as_deref(), Some("FIFREEZE"));
        assert_eq!(decode(0xc0045878, None).name.as_deref(), Some("FITHAW"));
        assert_eq!(decode(0x40049409, None).name.as_deref(), Some("FICLONE"));
        assert_eq!(
            decode(0x5401, Some("/dev/pts/0")).name.as_deref(),
            Some("TCGETS")
        );
        assert_eq!(decode(0x5402, None).name.as_deref(), Some("TCSETS"));
        assert_eq!(decode(0x541b, None).name.as_deref(), Some("FIONREAD"));
        assert_eq!(decode(0x5421, None).name.as_deref(), Some("FIONBIO"));
        assert_eq!(
            decode(0xc0406400, Some("/dev/dri/card0")).name.as_deref(),
            Some("DRM_IOCTL_VERSION")
        );
        // DRM by nr when the struct grew (SYNCOBJ_WAIT gained a field in newer kernels).
        let d = decode(0xc02864c3, Some("/dev/dri/renderD128"));
        assert_eq!(d.name.as_deref(), Some("DRM_IOCTL_SYNCOBJ_WAIT"));
        // Unknown everywhere: fields only.
        let d = decode(0xdeadbeef, None);
        assert_eq!(d.name, None);
        assert_eq!(d.driver, None);
        assert_eq!((d.ioctl_type, d.nr, d.size), (0xbe, 0xef, 0x1ead));
        assert_eq!(
            decode(0xdeadbeef, None).into_info(3, None).request,
            "0xdeadbeef"
        );
        assert_eq!(
            decode(0x5401, None).into_info(0, None).request,
            "0x00005401"
        );
    }
}
