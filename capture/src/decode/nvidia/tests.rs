use super::*;

#[test]
fn tables_parse_and_hold_known_entries() {
    assert!(
        tables().controls.len() > 1500,
        "{}",
        tables().controls.len()
    );
    assert!(tables().classes.len() > 200);
    assert!(tables().uvm.len() > 60);
    let c = control(0x20800102).unwrap();
    assert_eq!(c.name, "NV2080_CTRL_CMD_GPU_GET_INFO_V2");
    assert_eq!(c.flags, Some(0x30118));
    assert!(c.flag_names.contains("API_LOCK_READONLY"));
    assert_eq!(class_name(0x71), Some("NV01_MEMORY_SYSTEM_OS_DESCRIPTOR"));
    assert_eq!(class_name(0x2080), Some("NV20_SUBDEVICE_0"));
    assert_eq!(escape_name(0x2a), Some("NV_ESC_RM_CONTROL"));
    assert_eq!(escape_name(0xd3), Some("NV_ESC_IOCTL_XFER_CMD"));
    let m = uvm_command(51).unwrap();
    assert_eq!((m.name, m.params_size), ("UVM_MIGRATE", Some(80)));
    assert_eq!(uvm_command(0x30000001).unwrap().name, "UVM_INITIALIZE");
    assert_eq!(uvm_command(68).unwrap().name, "UVM_ALLOC_SEMAPHORE_POOL");
    assert!(tables_source().contains("595.45.04"));
}

#[test]
fn unknown_commands_are_named_from_their_bits() {
    let name = control_name(0x2080_3f07);
    assert!(
        name.starts_with("NV2080_CTRL_CMD(category 0x3f, index 0x07)"),
        "{name}"
    );
}

#[test]
fn lock_flags_read_as_locks() {
    assert_eq!(
        lock_summary(0x30118),
        "takes the API lock read-only + GPU lock (device only)"
    );
    assert_eq!(lock_summary(0x400001), "takes no API lock + no GPU lock");
    assert!(lock_summary(0x40).ends_with("routed to GSP/physical RM"));
}

fn nvos54(h_client: u32, h_object: u32, cmd: u32, params: u64, size: u32) -> Vec<u8> {
    let mut b = Vec::new();
    for v in [h_client, h_object, cmd, 0] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(&params.to_le_bytes());
    b.extend_from_slice(&size.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b
}

#[test]
fn control_struct() {
    let b = nvos54(0xc1d00001, 0x5c000003, 0x20800102, 0x7ffd_1234_5000, 0x408);
    let a = decode_rm_argument(NV_ESC_RM_CONTROL, 32, &b).unwrap();
    assert_eq!(
        a.cmd_name.as_deref(),
        Some("NV2080_CTRL_CMD_GPU_GET_INFO_V2")
    );
    assert_eq!(a.params.as_deref(), Some("0x7ffd12345000"));
    assert_eq!(a.params_size, Some(0x408));
    assert_eq!(a.handles[1], ("hObject".into(), "0x5c000003".into()));
    assert!(a.summary.unwrap().contains("API lock read-only"));
    let e = decode_rm_argument(NV_ESC_RM_CONTROL, 32, &b[..20]).unwrap_err();
    assert!(e.contains("only 20"), "{e}");
}

#[test]
fn alloc_via_xfer_and_alloc_memory() {
    let mut inner = Vec::new();
    for v in [0xc1d00001u32, 0xc1d00001, 0xcaf00002, 0x71] {
        inner.extend_from_slice(&v.to_le_bytes());
    }
    inner.extend_from_slice(&0x1000u64.to_le_bytes());
    inner.extend_from_slice(&0u64.to_le_bytes());
    inner.extend_from_slice(&[24, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let mut xfer = Vec::new();
    xfer.extend_from_slice(&0x2bu32.to_le_bytes());
    xfer.extend_from_slice(&48u32.to_le_bytes());
    xfer.extend_from_slice(&0x5555_0000u64.to_le_bytes());
    let a = decode_xfer(&xfer, &inner).unwrap();
    assert_eq!(a.structure.as_deref(), Some("NVOS64_PARAMETERS"));
    assert_eq!(
        a.class_name.as_deref(),
        Some("NV01_MEMORY_SYSTEM_OS_DESCRIPTOR")
    );
    assert_eq!(a.params_size, Some(24));
    assert_eq!(a.xfer.unwrap().ptr, 0x5555_0000);
    let mut mem = inner[..16].to_vec();
    mem.extend_from_slice(&[0; 40]);
    let a = decode_rm_argument(NV_ESC_RM_ALLOC_MEMORY, 56, &mem).unwrap();
    assert!(a
        .summary
        .unwrap()
        .starts_with("RM alloc memory NV01_MEMORY_SYSTEM_OS_DESCRIPTOR"));
    assert!(decode_xfer(&xfer[..8], &inner)
        .unwrap_err()
        .contains("nv_ioctl_xfer_t"));
}

#[test]
fn any_bytes_of_any_length_decode_or_give_a_reason() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for len in 0..80 {
        let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        for nr in [0x27, 0x29, 0x2a, 0x2b, 0xd3, 0x01] {
            for size in [0, 16, 32, 48, 56, u32::MAX] {
                let _ = decode_rm_argument(nr, size, &bytes);
                let _ = xfer_inner_read(&bytes);
                let _ = decode_argument(ArgumentKind::Rm { nr, size }, 1, &bytes, Some(&bytes));
            }
        }
        for cmd in [1, 51, 68, 0x30000001, 0xffff_ffff] {
            let _ = decode_argument(ArgumentKind::Uvm { cmd }, 1, &bytes, None);
        }
    }
}

#[test]
fn uvm_params() {
    let a = decode_uvm_argument(51, &[0u8; 80]).unwrap();
    assert_eq!(a.structure.as_deref(), Some("UVM_MIGRATE_PARAMS"));
    assert!(decode_uvm_argument(51, &[0u8; 79])
        .unwrap_err()
        .contains("truncated"));
    assert!(decode_uvm_argument(0x7777, &[]).is_err());
    assert_eq!(uvm_read_size(51), 80);
}
