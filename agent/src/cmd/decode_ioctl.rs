//! `wedge-capture decode-ioctl`: what an ioctl request word means on a given device.

use anyhow::Context;
use capture::decode::{device, drm, hex, ioctl, nvidia};

use crate::cli::{self, OutputFormat};
use crate::exit::{ExitCode, Failure};

/// Flags of `wedge-capture decode-ioctl`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Splits the word into _IOC dir/type/nr/size and names it from the tables: NVIDIA RM
escapes on /dev/nvidiactl and /dev/nvidiaN (decoded by nr and size, as the driver does),
raw UVM commands on /dev/nvidia-uvm[-tools] (compared whole, never _IOC-decoded), NVKMS on
/dev/nvidia-modeset, DRM core ioctls and the amdgpu/i915/xe driver ioctls on
/dev/dri/card*|renderD* (driver numbers 0x40..0x9f mean what the bound driver says: give
--driver, or it is read from /sys/class/drm/<node>/device/driver), AMD KFD ioctls on
/dev/kfd, and common Linux requests (FS_IOC_*, FIFREEZE, TCGETS, FIONREAD). A container's
paths as the host sees them (/nvidia0, /dri/renderD128, /kfd) mean the same devices. --driver
without --device decodes as on a DRM node of that driver; with a --device that is no DRM node,
or a driver without a table, it is refused (exit 2).

--arg decodes the struct the ioctl's pointer held (bytes as hex, spaces allowed, e.g. from a bug
report or `xxd -p`): RM control (NVOS54: handles, command name and its lock flags), RM alloc
(NVOS21/NVOS64: class name), RM free (NVOS00), RM alloc memory (NVOS02), NV_ESC_IOCTL_XFER_CMD
(nv_ioctl_xfer_t; --inner gives the struct at its ptr) and UVM params. Too few bytes: the reason,
exit 1.

Examples:
  wedge-capture decode-ioctl 0xc020462a --device /dev/nvidiactl
  wedge-capture decode-ioctl 0x30000001 --device /dev/nvidia-uvm
  wedge-capture decode-ioctl 0xc0186444 --device /dev/dri/renderD128 --driver amdgpu
  wedge-capture decode-ioctl 0xc0186444 --driver amdgpu
  wedge-capture decode-ioctl 0xc0184b0c --device /dev/kfd
  wedge-capture decode-ioctl 0x40086602 --format json
  wedge-capture decode-ioctl 0xc020462a --device /dev/nvidiactl \\
      --arg 0100d0c10300005c0201802000000000 00503412fd7f00000804000000000000")]
pub struct Args {
    /// The request word: hex (0x…) or decimal; the low 32 bits are used, as the kernel does.
    #[arg(value_name = "REQUEST")]
    pub request: String,
    /// The device node the fd points at (from /proc/<pid>/fd/<fd>); decides which table applies.
    #[arg(long, value_name = "PATH")]
    pub device: Option<String>,
    /// The kernel driver bound to a DRM --device (amdgpu, i915, xe): picks the table of the
    /// driver-specific numbers. Default: this machine's /sys/class/drm/<node>/device/driver.
    #[arg(long, value_name = "NAME")]
    pub driver: Option<String>,
    /// The argument struct's bytes in hex (what the ioctl's pointer points at); repeated values are joined.
    #[arg(long = "arg", value_name = "HEX", num_args = 1..)]
    pub arg: Vec<String>,
    /// For NV_ESC_IOCTL_XFER_CMD: the bytes at nv_ioctl_xfer_t.ptr (the real escape's struct).
    #[arg(long, value_name = "HEX", num_args = 1.., requires = "arg")]
    pub inner: Vec<String>,
    /// Output format: text, or json (the `ioctl` object of the capture contract, without fd).
    #[arg(long, value_name = "FORMAT", default_value = "text",
          value_parser = cli::formats(&[OutputFormat::Text, OutputFormat::Json]))]
    pub format: OutputFormat,
    /// Old spelling of `--format json`.
    #[arg(long, hide = true, conflicts_with = "format")]
    pub json: bool,
}

/// The DRM driver whose table decodes the request: `--driver` (refused where it cannot apply: a --device that
/// is no DRM node, a driver without a table), else the one bound to the DRM --device.
fn drm_driver(args: &Args) -> Result<Option<String>, Failure> {
    let device_kind = args.device.as_deref().map(device::DeviceKind::of);
    let Some(driver) = &args.driver else {
        return Ok(args
            .device
            .as_deref()
            .and_then(|path| device::drm_driver(std::path::Path::new("/sys"), path)));
    };
    if !drm::drm_drivers().contains(&driver.as_str()) {
        return Err(Failure::new(
            ExitCode::USAGE,
            format!(
                "--driver {driver:?}: no DRM table for it (tables: {})",
                drm::drm_drivers().join(", ")
            ),
        ));
    }
    if let (Some(device), Some(kind)) = (&args.device, device_kind) {
        if kind != device::DeviceKind::Drm {
            return Err(Failure::new(
                ExitCode::USAGE,
                format!(
                    "--driver applies to DRM nodes (/dev/dri/card*, renderD*); {device} is not one"
                ),
            ));
        }
    }
    Ok(Some(driver.clone()))
}

/// A DRM render node path, for decoding with `--driver` alone (only its kind matters; it is never printed).
const ANY_DRM_NODE: &str = "/dev/dri/renderD128";

fn bytes_arg(flag: &str, parts: &[String]) -> anyhow::Result<Vec<u8>> {
    hex::bytes(&parts.join(" ")).ok_or_else(|| {
        Failure::new(
            ExitCode::USAGE,
            format!("{flag} takes hex bytes (e.g. '01 00 d0 c1' or 0100d0c1): an even number of hex digits"),
        )
        .into()
    })
}

/// The decoded `--arg` struct, or an error with the reason when it cannot be decoded.
fn decode_arg(d: &ioctl::Decoded, args: &Args) -> anyhow::Result<Option<nvidia::IoctlArgument>> {
    if args.arg.is_empty() {
        return Ok(None);
    }
    let first = bytes_arg("--arg", &args.arg)?;
    let inner = if args.inner.is_empty() {
        None
    } else {
        Some(bytes_arg("--inner", &args.inner)?)
    };
    let info = d.clone().into_info(-1, args.device.clone());
    let kind = info.argument_kind().ok_or_else(|| {
        Failure::new(
            ExitCode::ERROR,
            format!(
                "no struct decoder for {} (decoded: NVIDIA RM control/alloc/free/alloc-memory/XFER and UVM commands; give --device)",
                d.name.as_deref().unwrap_or("this request")
            ),
        )
    })?;
    let a = nvidia::decode_argument(kind, 0, &first, inner.as_deref());
    if inner.is_some() && a.xfer.is_none() {
        return Err(Failure::new(
            ExitCode::USAGE,
            format!(
                "--inner is the struct at an NV_ESC_IOCTL_XFER_CMD's pointer; {} is not that escape",
                d.name.as_deref().unwrap_or("this request")
            ),
        )
        .into());
    }
    if a.structure.is_none() {
        if let Some(why) = &a.unavailable {
            return Err(
                Failure::new(ExitCode::ERROR, format!("cannot decode --arg: {why}")).into(),
            );
        }
    }
    Ok(Some(a))
}

fn print_argument(a: &nvidia::IoctlArgument) {
    if let Some(s) = &a.structure {
        println!("struct   {s} ({} bytes given)", a.bytes_read);
    }
    if let Some(x) = &a.xfer {
        println!(
            "xfer     escape {:#x} · size {} · ptr {:#x}",
            x.cmd, x.size, x.ptr
        );
    }
    for (name, value) in &a.handles {
        println!("{name:<8} {value}");
    }
    if let (Some(cmd), Some(name)) = (&a.cmd, &a.cmd_name) {
        println!("cmd      {cmd} {name}");
    }
    if let Some(f) = &a.lock_flags {
        println!("rmctrl   {f}");
    }
    if let Some(l) = &a.locks {
        println!("locks    {l}");
    }
    if let Some(c) = &a.class {
        println!(
            "class    {c} {}",
            a.class_name.as_deref().unwrap_or("(not in the tables)")
        );
    }
    if let Some(p) = &a.params {
        println!(
            "params   {p}{}",
            a.params_size
                .map(|s| format!(" · {s} bytes"))
                .unwrap_or_default()
        );
    } else if let Some(s) = a.params_size {
        println!("params   {s} bytes");
    }
    if let Some(s) = &a.status {
        println!("status   {s} (as user space left it; the driver writes it on return)");
    }
    if let Some(s) = &a.summary {
        println!("summary  {s}");
    }
    if let Some(u) = &a.unavailable {
        println!("missing  {u}");
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let request = hex::request_word(&args.request).ok_or_else(|| {
        Failure::new(
            ExitCode::USAGE,
            format!(
                "{:?} is not a number (use 0x… hex or decimal)",
                args.request
            ),
        )
    })?;
    let drm_driver = drm_driver(&args)?;
    // `--driver` alone: decode as on a DRM node of that driver.
    let decode_device = args
        .device
        .as_deref()
        .or(args.driver.as_ref().map(|_| ANY_DRM_NODE));
    let d = ioctl::decode_on(request, decode_device, drm_driver.as_deref());
    let argument = decode_arg(&d, &args)?;
    if cli::chosen(args.format, args.json) == OutputFormat::Json {
        let v = serde_json::json!({
            "request": format!("{:#010x}", d.request),
            "device": args.device,
            "drm_driver": drm_driver,
            "dir": d.dir,
            "type": d.ioctl_type,
            "nr": d.nr,
            "size": d.size,
            "name": d.name,
            "driver": d.driver,
            "note": d.note,
            "argument": argument,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).context("serializing")?
        );
        return Ok(ExitCode::OK);
    }
    println!("request  {:#010x}", d.request);
    match (&args.device, &args.driver) {
        (Some(dev), _) => println!("device   {dev}"),
        (None, Some(drv)) => println!("device   a DRM node bound to {drv} (--driver)"),
        (None, None) => {}
    }
    println!("name     {}", d.name.as_deref().unwrap_or("(unknown)"));
    if let Some(drv) = &d.driver {
        println!("driver   {drv}");
    }
    if d.driver.as_deref().is_some_and(drm::has_table) {
        println!("table    {}", drm::header_version());
    }
    if d.dir == "raw" {
        println!(
            "encoding raw command {:#x} (not _IOC-encoded; compared whole by the driver)",
            d.nr
        );
    } else {
        let t = char::from_u32(d.ioctl_type)
            .filter(|c| c.is_ascii_graphic())
            .map(|c| format!(" '{c}'"))
            .unwrap_or_default();
        println!(
            "_IOC     dir {} · type {:#04x}{t} · nr {:#04x} ({}) · size {}",
            d.dir, d.ioctl_type, d.nr, d.nr, d.size
        );
    }
    if let Some(n) = &d.note {
        println!("note     {n}");
    }
    if let Some(a) = &argument {
        print_argument(a);
    }
    Ok(ExitCode::OK)
}
