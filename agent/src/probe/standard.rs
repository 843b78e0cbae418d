//! The probes every wedge capture runs.

use capture::{ProcRoot, RiskyFile};

use super::confine::Confinement;
use super::model::{Probe, ProbeKind};

/// The probes a wedge capture runs for `pid`: its cmdline, the driver version, every GPU's information file,
/// and `nvidia-smi -q` when asked for and installed.
pub fn standard_probes(proc_root: &ProcRoot, pid: i32, with_nvidia_smi: bool) -> Vec<Probe> {
    let mut probes = vec![
        Probe::read_file(
            "cmdline",
            proc_root.risky_path(RiskyFile::Cmdline(pid)),
            "the target's mmap lock is probably held (a thread sits in a driver call or mmap while holding it)",
        ),
        Probe::read_file(
            "maps",
            proc_root.risky_path(RiskyFile::Maps(pid)),
            "the target's mmap lock is probably held (a thread changes its address space behind a stuck fault)",
        ),
        Probe::read_file(
            "nvidia-version",
            proc_root.risky_path(RiskyFile::NvidiaVersion),
            "the NVIDIA driver's proc files are blocked",
        ),
        Probe {
            name: "nvidia-gpus-information".to_string(),
            kind: ProbeKind::ReadEachSubdir {
                dir: proc_root.risky_path(RiskyFile::NvidiaGpus),
                file_name: "information".to_string(),
            },
            timeout_meaning: "the RM lock is probably held".to_string(),
        },
    ];
    if with_nvidia_smi {
        if let Some(program) = crate::tools::nvidia_smi() {
            probes.push(Probe {
                name: "nvidia-smi".to_string(),
                kind: ProbeKind::Command {
                    program: program.display().to_string(),
                    args: vec!["-q".to_string()],
                    confinement: Confinement::default(),
                },
                timeout_meaning: "the RM API or GPU lock is probably held (NVML waits on it)"
                    .to_string(),
            });
        }
    }
    probes
}
