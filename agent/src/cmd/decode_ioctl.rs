//! `wedge-capture decode-ioctl`: what an ioctl request word means on a given device.

use anyhow::Context;
use capture::ioctl;

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
  wedge-capture decode-ioctl 0x40086602 --json")]
pub struct Args {
    /// The request word: hex (0x…) or decimal; the low 32 bits are used, as the kernel does.
    #[arg(value_name = "REQUEST")]
    pub request: String,
    /// The device node the fd points at (from /proc/<pid>/fd/<fd>); decides which table applies.
    #[arg(long, value_name = "PATH")]
    pub device: Option<String>,
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
    Ok(ExitCode::OK)
}

#[cfg(test)]
mod tests {
    use super::parse_request;

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
