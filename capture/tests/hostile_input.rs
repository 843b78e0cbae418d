//! Parsers and decoders never panic, whatever the bytes (corrupt or hostile /proc trees, recordings).

use capture::parse::{cgroup, fd, stack, stat, status, syscall, wchan, Parse};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = stat::Stat::parse(&bytes);
        let _ = stat::parse_lite(&bytes);
        let _ = status::Status::parse(&bytes);
        let _ = wchan::parse(&bytes);
        let _ = syscall::Syscall::parse(&bytes);
        let _ = stack::parse(&bytes);
        let _ = cgroup::parse(&bytes);
        let _ = fd::parse_link(&bytes);
        let _ = fd::parse_ns_inode(&bytes);
        if let Ok(s) = std::str::from_utf8(&bytes) {
            let _ = cgroup::container_id(s);
            let frames = stack::parse(&bytes).unwrap_or_default();
            let _ = capture::site::classify(&frames, Some(s), Some(s));
        }
    }

    /// Plausible-looking lines with random fields: still no panic, and well-formed ones parse.
    #[test]
    fn stat_lines_with_random_comm(comm in "[ -~]{0,40}", state in "[RSDTtZXIP]", nums in proptest::collection::vec(0u64..1_000_000, 50)) {
        let rest: Vec<String> = nums.iter().map(|n| n.to_string()).collect();
        let line = format!("123 ({comm}) {state} {}\n", rest.join(" "));
        let s = stat::Stat::parse(line.as_bytes()).unwrap();
        prop_assert_eq!(s.comm, comm);
        prop_assert_eq!(s.utime, nums[10]);
        prop_assert_eq!(s.stime, nums[11]);
        let l = stat::parse_lite(line.as_bytes()).unwrap();
        prop_assert_eq!(l.cpu_ticks, nums[10] + nums[11]);
    }

    #[test]
    fn every_request_word_decodes(request in any::<u32>(), dev in prop_oneof![
        Just(None), Just(Some("/dev/nvidiactl")), Just(Some("/dev/nvidia0")), Just(Some("/dev/nvidia-uvm")),
        Just(Some("/dev/nvidia-uvm-tools")), Just(Some("/dev/nvidia-modeset")), Just(Some("/dev/dri/card0")),
        Just(Some("/dev/pts/1")), Just(Some("/tmp/file")),
    ]) {
        let d = capture::decode::ioctl::decode(request, dev);
        prop_assert_eq!(d.request, request);
        let info = d.into_info(3, dev.map(str::to_string));
        prop_assert_eq!(info.request, format!("{request:#010x}"));
    }
}

proptest! {
    /// Any word on any GPU node, host or container path, with any (or no) DRM driver: decoded, never a panic;
    /// a container path and its host path give the same name and driver.
    #[test]
    fn every_request_word_decodes_on_gpu_nodes_with_any_driver(
        request in any::<u32>(),
        node in prop_oneof![
            Just("nvidiactl"), Just("nvidia0"), Just("nvidia-uvm"), Just("dri/renderD128"),
            Just("dri/card0"), Just("kfd"),
        ],
        driver in prop_oneof![
            Just(None), Just(Some("amdgpu")), Just(Some("i915")), Just(Some("xe")),
            Just(Some("nouveau")), Just(Some("")),
        ],
    ) {
        let host = format!("/dev/{node}");
        let container = format!("/{node}");
        let on_host = capture::decode::ioctl::decode_on(request, Some(&host), driver);
        let in_container = capture::decode::ioctl::decode_on(request, Some(&container), driver);
        prop_assert_eq!(&on_host.name, &in_container.name);
        prop_assert_eq!(&on_host.driver, &in_container.driver);
        prop_assert_eq!(on_host.request, request);
    }

    /// Any fd link text classifies without a panic, and only `/dev/…` or a top-level GPU node is a device.
    #[test]
    fn any_path_classifies(path in ".{0,64}") {
        use capture::decode::device::DeviceKind;
        let kind = DeviceKind::of(&path);
        if kind != DeviceKind::Other {
            prop_assert!(path.starts_with('/'), "{path:?}");
        }
        let _ = capture::decode::device::drm_node_name(&path);
    }
}
