//! Round 12b's notations: a profiler's numbered stack, a board farm's labels and level/facility around the
//! timestamp, and x86's register summary after an oops's end.

use super::*;

#[test]
fn a_profilers_numbered_kernel_stack() {
    let log = "\
  0. osDevReadReg032  (<kernel>) nvidia
  1. kgmmuCheckPendingInvalidates_TU102  (<kernel>) nvidia
  2. rm_ioctl  (<kernel>) nvidia
  3. __x64_sys_ioctl  (<kernel>) <kernel>
";
    let e = explain(log.as_bytes()).unwrap();
    assert_eq!(e.tasks.len(), 1);
    assert_eq!(
        frame_names(&e.tasks[0]),
        [
            "osDevReadReg032",
            "kgmmuCheckPendingInvalidates_TU102",
            "rm_ioctl",
            "__x64_sys_ioctl"
        ]
    );
    assert_eq!(e.tasks[0].stack[0].module.as_deref(), Some("nvidia"));
    // A numbered list in prose is no stack.
    assert!(explain(b"  1. Install the driver (<b>) then reboot\n").is_err());
}

#[test]
fn a_board_farms_labels_and_level_facility() {
    let log = "\
boot: logs: [   16.166216] WARNING KERN CPU: 2 PID: 90 Comm: kworker/2:1 Not tainted 5.4.110 #1
boot: logs: [   16.166233] WARNING KERN Workqueue: pm pm_runtime_work
boot: logs: [   16.166467] WARNING KERN Call trace:
boot: logs: [   16.166474] WARNING KERN  reset_control_assert+0x174/0x1a8
boot: logs: [   16.166516] WARNING KERN  tegra_sor_suspend+0x24/0x88 [tegra_drm]
";
    let e = explain(log.as_bytes()).unwrap();
    assert_eq!(e.tasks.len(), 1);
    assert_eq!(e.tasks[0].task, "kworker/2:1");
    assert_eq!(
        frame_names(&e.tasks[0]),
        ["reset_control_assert", "tegra_sor_suspend"]
    );
}

#[test]
fn the_register_summary_after_an_oops_is_not_another_task() {
    let log = "\
[   10.1] CPU: 0 UID: 0 PID: 15038 Comm: rpc-virtqemud Tainted: G O 7.0.1 #1
[   10.1] RIP: 0010:nv_audio_dynamic_power+0xc0/0x140 [nvidia]
[   10.1] Call Trace:
[   10.1]  <TASK>
[   10.1]  nv_pci_remove_helper+0x75/0x4e0 [nvidia]
[   10.1]  __x64_sys_write+0x84/0xf0
[   10.1]  </TASK>
[   10.1] ---[ end trace 0000000000000000 ]---
[   10.1] RIP: 0010:nv_audio_dynamic_power+0xc0/0x140 [nvidia]
";
    let e = explain(log.as_bytes()).unwrap();
    assert_eq!(e.tasks.len(), 1);
    // A second oops after the end has its own header, and its RIP is its own.
    let two = format!(
        "{log}[   11.2] CPU: 1 UID: 0 PID: 7 Comm: kworker/1:0 Tainted: G O 7.0.1 #1\n\
             [   11.2] RIP: 0010:nv_audio_dynamic_power+0xc0/0x140 [nvidia]\n"
    );
    assert_eq!(explain(two.as_bytes()).unwrap().tasks.len(), 2);
}
