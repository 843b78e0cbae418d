//! ioctl request decoding: `_IOC` fields, and names from the generated tables.
//!
//! - `data/nvidia-ioctls.tsv` (copied from the project's reference, source header kept): NVIDIA RM escapes
//!   on `/dev/nvidiactl` and `/dev/nvidiaN` (magic `F`; the driver keys on `_IOC_NR` and `_IOC_SIZE` only,
//!   so type and dir are ignored here too), the NVKMS command on `/dev/nvidia-modeset`, and UVM commands on
//!   `/dev/nvidia-uvm` / `-tools`, which are raw integers compared whole and must NOT be `_IOC`-decoded
//!   (0x30000001 read as `_IOC` would collide with UVM_RESERVE_VA = 1).
//! - `data/drm-kfd-ioctls.tsv` ([`super::drm`]): DRM core ioctls, the DRM driver ioctls of amdgpu, i915
//!   and xe (chosen by the driver bound to the node), and AMD KFD ioctls on `/dev/kfd`.
//! - `data/linux-ioctls.tsv`: common Linux requests (FS_IOC_*, FIFREEZE, TCGETS, FIONREAD),
//!   computed from UAPI headers by `data/gen/gen_linux_ioctls.sh`.
//!
//! The device node (from the fd link, classified by [`super::device::DeviceKind`]) decides which table
//! applies. Unknown requests still show their `_IOC` fields. Encoding (asm-generic/ioctl.h, identical on
//! x86_64 and aarch64): `dir<<30 | size<<16 | type<<8 | nr`, dir 1 = write, 2 = read.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::device::{self, DeviceKind};
use super::drm;
use super::hex;
use super::table::Table;
use crate::snapshot::IoctlInfo;

const NVIDIA_TSV: Table = Table::new(include_str!("../../data/nvidia-ioctls.tsv"), "device");
const LINUX_TSV: Table = Table::new(include_str!("../../data/linux-ioctls.tsv"), "request");

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
    /// The request's `_IOC` fields, nothing named.
    fn fields(request: u32, f: IocFields) -> Decoded {
        Decoded {
            request,
            dir: f.dir_name().into(),
            ioctl_type: f.ioctl_type,
            nr: f.nr,
            size: f.size,
            name: None,
            driver: None,
            note: None,
        }
    }

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
    };
    for cols in NVIDIA_TSV.rows(5) {
        let Some(value) = hex::u32_hex(cols[2]) else {
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
    for cols in LINUX_TSV.rows(3) {
        let Some(request) = hex::u32_hex(cols[0]) else {
            continue;
        };
        let row = LinuxRow {
            name: cols[1],
            driver: cols[2],
            note: cols.get(3).copied().unwrap_or(""),
        };
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
        let on_ctl = device::is_nvidia_control_node(dev);
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

/// Common Linux requests, then the DRM core's by their whole word (a DRM fd seen as a regular file, or
/// no device given).
fn decode_linux(request: u32, f: IocFields) -> Option<Decoded> {
    if let Some(row) = tables().linux_by_request.get(&request) {
        return Some(Decoded::named(
            request,
            f,
            row.name,
            row.driver,
            (!row.note.is_empty()).then(|| row.note.to_string()),
        ));
    }
    drm::find(drm::CORE, request)
        .filter(|found| found.exact)
        .map(|found| from_drm_table(request, f, found))
}

/// A DRM/KFD table row as a decoded request; a row matched by number only says so.
fn from_drm_table(request: u32, f: IocFields, found: drm::Found) -> Decoded {
    let row = found.ioctl;
    let mut notes = Vec::new();
    if !row.note.is_empty() {
        notes.push(row.note.to_string());
    }
    if !found.exact {
        notes.push(format!(
            "matched by nr; the {} header's word is {:#010x} (size {}, dir {}): another kernel version's struct",
            drm::header_version(),
            row.request,
            IocFields::of(row.request).size,
            IocFields::of(row.request).dir_name()
        ));
    }
    Decoded::named(
        request,
        f,
        row.name,
        row.driver,
        (!notes.is_empty()).then(|| notes.join("; ")),
    )
}

/// An ioctl on a DRM node: core numbers from drm.h, driver numbers from the bound driver's table.
fn decode_drm(request: u32, f: IocFields, drm_driver: Option<&str>) -> Option<Decoded> {
    if f.ioctl_type != drm::DRM_TYPE {
        return decode_linux(request, f);
    }
    if !drm::DRIVER_RANGE.contains(&f.nr) {
        return drm::find(drm::CORE, request).map(|found| from_drm_table(request, f, found));
    }
    let unnamed = |driver: &str, note: String| Decoded {
        driver: Some(driver.to_string()),
        note: Some(note),
        name: None,
        ..Decoded::fields(request, f)
    };
    let Some(driver) = drm_driver else {
        let mut note = format!("driver-specific ioctl {:#04x} (driver unknown)", f.nr);
        let candidates = drm::exact_candidates(request);
        if !candidates.is_empty() {
            let named: Vec<String> = candidates
                .iter()
                .map(|c| format!("{} on {}", c.name, c.driver))
                .collect();
            note.push_str(&format!("; this word is {}", named.join(", ")));
        }
        return Some(unnamed("drm", note));
    };
    if !drm::has_table(driver) {
        return Some(unnamed(
            driver,
            format!(
                "driver-specific ioctl {:#04x} of {driver} (no table for this driver; tables: {})",
                f.nr,
                drm::drm_drivers().join(", ")
            ),
        ));
    }
    Some(match drm::find(driver, request) {
        Some(found) => from_drm_table(request, f, found),
        None => unnamed(
            driver,
            format!(
                "driver-specific ioctl {:#04x} not in the {driver} table ({} headers)",
                f.nr,
                drm::header_version()
            ),
        ),
    })
}

/// An ioctl on `/dev/kfd`.
fn decode_kfd(request: u32, f: IocFields) -> Option<Decoded> {
    if f.ioctl_type != drm::KFD_TYPE {
        return None;
    }
    drm::find(drm::KFD, request).map(|found| from_drm_table(request, f, found))
}

/// Device unknown (decode-ioctl without --device): names only where the word is unambiguous.
fn decode_unknown_device(request: u32, f: IocFields) -> Option<Decoded> {
    let rm = (f.ioctl_type == u32::from(b'F'))
        .then(|| decode_rm(request, f, None))
        .flatten()
        .filter(|d| !d.note.as_deref().unwrap_or("").contains("differs"));
    rm.or_else(|| decode_modeset(request, f))
        .or_else(|| {
            (request >> 16 == 0x3000)
                .then(|| decode_uvm(request, DeviceKind::Other))
                .flatten()
        })
        .or_else(|| {
            let found = drm::find(drm::KFD, request).filter(|found| found.exact)?;
            let mut d = from_drm_table(request, f, found);
            d.note = Some(format!(
                "fd device unknown: named as an AMD KFD ioctl (valid only on /dev/kfd){}",
                d.note.map(|n| format!("; {n}")).unwrap_or_default()
            ));
            Some(d)
        })
}

/// The driver a request on a device of `kind` is attributed to when no table names it.
fn fallback_driver(kind: DeviceKind) -> Option<&'static str> {
    Some(match kind {
        DeviceKind::NvidiaRm => "nvidia-rm",
        DeviceKind::NvidiaUvm => "nvidia-uvm",
        DeviceKind::NvidiaUvmTools => "nvidia-uvm-tools",
        DeviceKind::NvidiaModeset => "nvidia-modeset",
        DeviceKind::Drm => "drm",
        DeviceKind::Kfd => drm::KFD,
        DeviceKind::Tty => "tty",
        DeviceKind::NvidiaCaps | DeviceKind::Other => return None,
    })
}

/// Decodes `request` (the low 32 bits of the ioctl's second argument) for the device at `device`
/// (the fd's link target), or for an unknown device. A DRM driver ioctl is named only with its driver:
/// see [`decode_on`].
pub fn decode(request: u32, device: Option<&str>) -> Decoded {
    decode_on(request, device, None)
}

/// [`decode`], with the kernel driver bound to a DRM node (`amdgpu`, `i915`, `xe`, from
/// [`device::drm_driver`]) choosing the table of the driver-specific numbers.
pub fn decode_on(request: u32, device: Option<&str>, drm_driver: Option<&str>) -> Decoded {
    let f = IocFields::of(request);
    let kind = device.map_or(DeviceKind::Other, DeviceKind::of);
    let raw = matches!(kind, DeviceKind::NvidiaUvm | DeviceKind::NvidiaUvmTools);
    let named = match kind {
        DeviceKind::NvidiaRm => decode_rm(request, f, device),
        DeviceKind::NvidiaUvm | DeviceKind::NvidiaUvmTools => decode_uvm(request, kind),
        DeviceKind::NvidiaModeset => decode_modeset(request, f),
        DeviceKind::Drm => decode_drm(request, f, drm_driver),
        DeviceKind::Kfd => decode_kfd(request, f),
        DeviceKind::Tty | DeviceKind::NvidiaCaps => decode_linux(request, f),
        DeviceKind::Other => decode_linux(request, f).or_else(|| {
            device
                .is_none()
                .then(|| decode_unknown_device(request, f))?
        }),
    };
    named.unwrap_or_else(|| Decoded {
        dir: if raw {
            "raw".into()
        } else {
            f.dir_name().into()
        },
        nr: if raw { request } else { f.nr },
        driver: fallback_driver(kind).map(str::to_string),
        ..Decoded::fields(request, f)
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
        // DRM by nr when the struct differs (SYNCOBJ_WAIT gained a field in 6.x: 0x20 → 0x28 bytes).
        let d = decode(0xc02064c3, Some("/dev/dri/renderD128"));
        assert_eq!(d.name.as_deref(), Some("DRM_IOCTL_SYNCOBJ_WAIT"));
        assert!(d.note.unwrap().contains("matched by nr"));
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

    #[test]
    fn container_device_paths_decode_like_host_ones() {
        // A container's private /dev reads `/nvidia0` from the host: the same escape, the same driver
        // (before the one classifier, `/nvidia0` decoded as an unknown device, so the argument stage
        // skipped it while the daemon counted the process as a GPU holder).
        for (host, container) in [
            ("/dev/nvidiactl", "/nvidiactl"),
            ("/dev/nvidia0", "/nvidia0"),
            ("/dev/nvidia0 (deleted)", "/nvidia0 (deleted)"),
        ] {
            let on_host = decode(0xc020462a, Some(host));
            assert_eq!(on_host.name.as_deref(), Some("NV_ESC_RM_CONTROL"), "{host}");
            let mut in_container = decode(0xc020462a, Some(container));
            // Notes name the path as the fd showed it.
            in_container.note = in_container.note.map(|n| n.replace(container, host));
            assert_eq!(in_container, on_host, "{container}");
        }
        assert_eq!(
            decode(0x33, Some("/nvidia-uvm")),
            decode(0x33, Some("/dev/nvidia-uvm"))
        );
        // CARD_INFO is accepted only on the control node: the same note in a container.
        let note = |dev| decode(0xc04846c8, Some(dev)).note;
        assert!(note("/nvidia0").unwrap().contains("only on /dev/nvidiactl"));
        assert!(note("/dev/nvidia0")
            .unwrap()
            .contains("only on /dev/nvidiactl"));
        assert_eq!(note("/nvidiactl"), None);
        assert_eq!(note("/dev/nvidiactl"), None);
        assert_eq!(
            decode(0xc0186444, Some("/dri/renderD128")),
            decode(0xc0186444, Some("/dev/dri/renderD128"))
        );
    }

    /// The request words of the generated table's headers (Linux 6.12 UAPI), one per family.
    const VERSION: u32 = 0xc0406400;
    const SYNCOBJ_WAIT: u32 = 0xc02864c3;
    const AMDGPU_CS: u32 = 0xc0186444;
    const AMDGPU_WAIT_CS: u32 = 0xc0206449;
    const I915_GEM_EXECBUFFER2: u32 = 0x40406469;
    const KFD_ALLOC_MEMORY_OF_GPU: u32 = 0xc0284b16;
    const KFD_WAIT_EVENTS: u32 = 0xc0184b0c;

    fn name_and_driver(d: &Decoded) -> (Option<&str>, Option<&str>) {
        (d.name.as_deref(), d.driver.as_deref())
    }

    #[test]
    fn drm_core_and_driver_ioctls_by_the_bound_driver() {
        let node = Some("/dev/dri/renderD128");
        for driver in [
            None,
            Some("amdgpu"),
            Some("i915"),
            Some("xe"),
            Some("nouveau"),
        ] {
            let d = decode_on(VERSION, node, driver);
            assert_eq!(
                name_and_driver(&d),
                (Some("DRM_IOCTL_VERSION"), Some("drm"))
            );
            let d = decode_on(SYNCOBJ_WAIT, node, driver);
            assert_eq!(
                name_and_driver(&d),
                (Some("DRM_IOCTL_SYNCOBJ_WAIT"), Some("drm"))
            );
            assert_eq!(d.note.as_deref(), Some("waits for GPU fences"));
        }
        let d = decode_on(AMDGPU_CS, node, Some("amdgpu"));
        assert_eq!(
            name_and_driver(&d),
            (Some("DRM_IOCTL_AMDGPU_CS"), Some("amdgpu"))
        );
        assert_eq!((d.ioctl_type, d.nr, d.size), (u32::from(b'd'), 0x44, 0x18));
        let d = decode_on(AMDGPU_WAIT_CS, Some("/dev/dri/card1"), Some("amdgpu"));
        assert_eq!(
            name_and_driver(&d),
            (Some("DRM_IOCTL_AMDGPU_WAIT_CS"), Some("amdgpu"))
        );
        let d = decode_on(I915_GEM_EXECBUFFER2, node, Some("i915"));
        assert_eq!(
            name_and_driver(&d),
            (Some("DRM_IOCTL_I915_GEM_EXECBUFFER2"), Some("i915"))
        );
        // The same number means something else on another driver: 0x44 on i915 is not AMDGPU_CS.
        let d = decode_on(AMDGPU_CS, node, Some("i915"));
        assert_ne!(d.name.as_deref(), Some("DRM_IOCTL_AMDGPU_CS"));
        assert_eq!(d.driver.as_deref(), Some("i915"));
        // Driver unknown: no name, the number, and what the word would be per driver.
        let d = decode_on(AMDGPU_CS, node, None);
        assert_eq!(name_and_driver(&d), (None, Some("drm")));
        let note = d.note.unwrap();
        assert!(
            note.starts_with("driver-specific ioctl 0x44 (driver unknown)"),
            "{note}"
        );
        assert!(note.contains("DRM_IOCTL_AMDGPU_CS on amdgpu"), "{note}");
        // A driver without a table.
        let d = decode_on(AMDGPU_CS, node, Some("nouveau"));
        assert_eq!(name_and_driver(&d), (None, Some("nouveau")));
        assert!(d.note.unwrap().contains("no table for this driver"));
        // A number the driver's table lacks.
        let d = decode_on(0xc0086499, node, Some("amdgpu"));
        assert_eq!(d.name, None);
        assert!(d.note.unwrap().contains("not in the amdgpu table"));
    }

    #[test]
    fn kfd_ioctls_on_dev_kfd() {
        for dev in ["/dev/kfd", "/kfd"] {
            let d = decode(KFD_ALLOC_MEMORY_OF_GPU, Some(dev));
            assert_eq!(
                name_and_driver(&d),
                (Some("AMDKFD_IOC_ALLOC_MEMORY_OF_GPU"), Some("amdkfd"))
            );
            let d = decode(KFD_WAIT_EVENTS, Some(dev));
            assert_eq!(
                name_and_driver(&d),
                (Some("AMDKFD_IOC_WAIT_EVENTS"), Some("amdkfd"))
            );
            assert!(d.note.unwrap().contains("waits for KFD events"));
        }
        // 'K' words mean nothing on a DRM node, and a DRM word nothing on /dev/kfd.
        assert_eq!(
            decode(KFD_WAIT_EVENTS, Some("/dev/dri/renderD128")).name,
            None
        );
        let d = decode(AMDGPU_CS, Some("/dev/kfd"));
        assert_eq!(name_and_driver(&d), (None, Some("amdkfd")));
        // Without a device a whole KFD word is still named, with the caveat.
        let d = decode(KFD_WAIT_EVENTS, None);
        assert_eq!(d.name.as_deref(), Some("AMDKFD_IOC_WAIT_EVENTS"));
        assert!(d.note.unwrap().contains("fd device unknown"));
    }
}
