//! `wedge-capture decode-ioctl`: what an ioctl request word means on a given device.

use anyhow::Context;
use capture::{ioctl, nvidia};

use crate::exit::{ExitCode, Failure};

/// Flags of `wedge-capture decode-ioctl`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Splits the word into _IOC dir/type/nr/size and names it from the tables: NVIDIA RM
escapes on /dev/nvidiactl and /dev/nvidiaN (decoded by nr and size, as the driver does),
raw UVM commands on /dev/nvidia-uvm[-tools] (compared whole, never _IOC-decoded), NVKMS on
/dev/nvidia-modeset, and common Linux requests (FS_IOC_*, FIFREEZE, TCGETS, FIONREAD, DRM).

Examples:
  wedge-capture decode-ioctl 0xc020462a --device /dev/nvidiactl
  wedge-capture decode-ioctl 0x30000001 --device /dev/nvidia-uvm
  wedge-capture decode-ioctl 0x40086602 --json
  wedge-capture decode-ioctl 0xc020462a --device /dev/nvidiactl \\
      --arg '01 00 d0 c1 03 00 00 5c 02 01 80 20 00 00 00 00 00 50 34 12 fd 7f 00 00 08 04 00 00 00 00 00 00'

--arg decodes the struct the ioctl's pointer held (bytes as hex, spaces allowed, e.g. from a bug
report or `xxd -p`): RM control (NVOS54: handles, command name and its lock flags), RM alloc
(NVOS21/NVOS64: class name), RM free (NVOS00), RM alloc memory (NVOS02), NV_ESC_IOCTL_XFER_CMD
(nv_ioctl_xfer_t; --inner gives the struct at its ptr) and UVM params. Too few bytes: the reason,
exit 1.")]
pub struct Args {
    /// The request word: hex (0x…) or decimal; the low 32 bits are used, as the kernel does.
    #[arg(value_name = "REQUEST")]
    pub request: String,
    /// The device node the fd points at (from /proc/<pid>/fd/<fd>); decides which table applies.
    #[arg(long, value_name = "PATH")]
    pub device: Option<String>,
    /// The argument struct's bytes in hex (what the ioctl's pointer points at); repeated values are joined.
    #[arg(long = "arg", value_name = "HEX", num_args = 1..)]
    pub arg: Vec<String>,
    /// For NV_ESC_IOCTL_XFER_CMD: the bytes at nv_ioctl_xfer_t.ptr (the real escape's struct).
    #[arg(long, value_name = "HEX", num_args = 1.., requires = "arg")]
    pub inner: Vec<String>,
    /// Print JSON (the `ioctl` object of the capture contract, without fd).
    #[arg(long)]
    pub json: bool,
}

fn parse_request(s: &str) -> Option<u32> {
    let s = s.trim();
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok()?,
        None => s.parse::<u64>().ok()?,
    };
    // A sign-extended 32-bit request (0xffffffffc020462a) means the same word.
    Some(v as u32)
}

/// Hex bytes, whitespace, `:` and `0x` prefixes allowed: "01 00 d0 c1", "0100d0c1", "0x01:0x00".
fn parse_hex_bytes(parts: &[String]) -> Option<Vec<u8>> {
    let mut digits = String::new();
    for token in parts
        .iter()
        .flat_map(|p| p.split(|c: char| c.is_whitespace() || c == ':' || c == ','))
    {
        let token = token
            .strip_prefix("0x")
            .or_else(|| token.strip_prefix("0X"))
            .unwrap_or(token);
        digits.push_str(token);
    }
    if !digits.len().is_multiple_of(2) || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).ok())
        .collect()
}

fn bytes_arg(flag: &str, parts: &[String]) -> anyhow::Result<Vec<u8>> {
    parse_hex_bytes(parts).ok_or_else(|| {
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
    let kind = nvidia::ArgumentKind::of(&info).ok_or_else(|| {
        Failure::new(
            ExitCode::ERROR,
            format!(
                "no struct decoder for {} (decoded: NVIDIA RM control/alloc/free/alloc-memory/XFER and UVM commands; give --device)",
                d.name.as_deref().unwrap_or("this request")
            ),
        )
    })?;
    let a = nvidia::decode_argument(kind, 0, &first, inner.as_deref());
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
    let request = parse_request(&args.request).ok_or_else(|| {
        Failure::new(
            ExitCode::USAGE,
            format!(
                "{:?} is not a number (use 0x… hex or decimal)",
                args.request
            ),
        )
    })?;
    let d = ioctl::decode(request, args.device.as_deref());
    let argument = decode_arg(&d, &args)?;
    if args.json {
        let v = serde_json::json!({
            "request": format!("{:#010x}", d.request),
            "device": args.device,
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
    if let Some(dev) = &args.device {
        println!("device   {dev}");
    }
    println!("name     {}", d.name.as_deref().unwrap_or("(unknown)"));
    if let Some(drv) = &d.driver {
        println!("driver   {drv}");
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

#[cfg(test)]
mod tests {
    use super::{parse_hex_bytes, parse_request};

    #[test]
    fn hex_byte_forms() {
        let v = |s: &str| vec![s.to_string()];
        assert_eq!(
            parse_hex_bytes(&v("01 00 d0 c1")),
            Some(vec![1, 0, 0xd0, 0xc1])
        );
        assert_eq!(
            parse_hex_bytes(&v("0100d0c1")),
            Some(vec![1, 0, 0xd0, 0xc1])
        );
        assert_eq!(parse_hex_bytes(&v("0x01:0x00")), Some(vec![1, 0]));
        assert_eq!(parse_hex_bytes(&v("010")), None);
        assert_eq!(parse_hex_bytes(&v("zz")), None);
    }

    #[test]
    fn request_forms() {
        assert_eq!(parse_request("0xc020462a"), Some(0xc020462a));
        assert_eq!(parse_request("0XC020462A"), Some(0xc020462a));
        assert_eq!(parse_request("0xffffffffc020462a"), Some(0xc020462a));
        assert_eq!(parse_request("21505"), Some(0x5401));
        assert_eq!(parse_request("nope"), None);
        assert_eq!(parse_request("0x"), None);
    }
}
