//! Stacks built from the GPU drivers' source (issue 38), not recorded traces: each is the call chain the
//! driver's code makes to the wait a row names (the function and file are cited in the row), in both forms
//! a site sees — a hung-task dump with the scheduler's lock and sleep functions, and `/proc/<tid>/stack`,
//! which omits the `__sched` ones. The recorded public traces are in `tests/traces.rs`.

use super::*;
use crate::parse::stack;

/// Functions the kernel marks `__sched` (left out of `/proc/<tid>/stack`).
const SCHED: &[&str] = &[
    "__schedule",
    "schedule",
    "schedule_timeout",
    "schedule_hrtimeout_range",
    "usleep_range_state",
    "__mutex_lock",
    "mutex_lock",
    "mutex_lock_interruptible",
    "ww_mutex_lock",
    "ww_mutex_lock_interruptible",
    "__ww_mutex_lock",
    "rwsem_down_read_slowpath",
    "rwsem_down_write_slowpath",
    "down_read",
    "down_read_interruptible",
    "down_write",
    "down_write_killable",
    "down",
    "down_interruptible",
    "__down",
    "__down_common",
    "__down_interruptible",
    "wait_for_completion",
    "wait_for_completion_timeout",
    "__wait_for_common",
];

/// A stack from `func [module] < caller < …` (innermost first, down to the syscall or kernel-thread entry).
fn stack(names: &str, proc_form: bool) -> Vec<StackFrame> {
    let text: String = names
        .split(" < ")
        .filter(|n| !proc_form || !SCHED.contains(&n.split(' ').next().unwrap_or("")))
        .map(|n| match n.split_once(' ') {
            Some((f, m)) => format!("[<0>] {f}+0x10/0x80 {m}\n"),
            None => format!("[<0>] {n}+0x10/0x80\n"),
        })
        .collect();
    stack::parse(text.as_bytes()).unwrap()
}

/// The site in both forms.
fn sites(names: &str) -> [String; 2] {
    [false, true].map(|p| classify(&stack(names, p), None, None).unwrap())
}

/// Checks the site of `names` in both forms: each of `dump` (and `proc`) is in it, none of `never`.
fn check(names: &str, dump: &[&str], proc: &[&str], never: &[&str]) {
    let [d, p] = sites(names);
    for (site, want) in [(&d, dump), (&p, proc)] {
        for w in want {
            assert!(site.contains(w), "{site:?} lacks {w:?}");
        }
        for n in never {
            assert!(!site.contains(n), "{site:?} says {n:?}");
        }
    }
}

/// kernel-open/nvidia-modeset/nvidia-modeset-linux.c: nvkms_ioctl_common runs the request under nvkms_lock; its
/// RM call (nvkms_call_rm → rm_kernel_rmapi_op) waits for the RM API lock: the thread holds the nvkms lock, it
/// does not wait for it (before: "[nvidia-modeset global lock]").
#[test]
fn nvidia_modeset_holding_the_nvkms_lock_waits_for_the_rm_api_lock() {
    check(
        NVKMS_HOLDER_PROPRIETARY,
        &["[RM API lock (write)]"],
        &["[RM API lock (write)]"],
        &["global lock"],
    );
}

/// The same call where the RM's frames name nothing (the proprietary module under GSP): the RM call, holding
/// the lock.
#[test]
fn nvidia_modeset_rm_call_in_obfuscated_frames_holds_the_nvkms_lock() {
    check(
        NVKMS_HOLDER_GSP,
        &["[nvidia-modeset RM call (holds the nvkms lock)]"],
        &["[nvidia-modeset RM call (holds the nvkms lock)]"],
        &["global lock"],
    );
}

/// A waiter: only the semaphore's primitives inner to the entry (down → __down_common), or none in `/proc`.
#[test]
fn nvidia_modeset_waiter_on_the_nvkms_lock() {
    check(
        NVKMS_WAITER,
        &["semaphore wait [nvidia-modeset global lock]"],
        &["nvkms_ioctl_from_kapi_try_pmlock [nvidia-modeset global lock]"],
        &[],
    );
}

/// kernel-open/nvidia-drm/nvidia-drm-modeset.c: nv_drm_atomic_commit's wait_event_timeout on flip_event_wq.
#[test]
fn nvidia_drm_blocking_commit_waits_for_the_flip_event() {
    check(
        NV_DRM_FLIP,
        &["[flip event wait (nvidia_drm)"],
        &["[flip event wait (nvidia_drm)"],
        &["not visible"],
    );
}

/// kernel-open/common/nv-kthread-q.c: nv_kthread_q_flush's wait_for_completion.
#[test]
fn nvidia_uvm_release_flushes_its_kthread_queue() {
    check(
        NV_KTHREAD_Q_FLUSH,
        &["[kthread queue flush (nvidia_uvm)"],
        &["[kthread queue flush (nvidia_uvm)"],
        &[],
    );
}

/// kernel-open/nvidia/nv.c: opening the control device takes nvl->ldata_lock (down).
#[test]
fn nvidia_open_waits_for_the_device_ldata_lock() {
    check(
        NV_LDATA_LOCK,
        &["semaphore wait on the NVIDIA device's ldata_lock"],
        &["semaphore wait on the NVIDIA device's ldata_lock"],
        &[],
    );
}

/// drivers/gpu/drm/msm/disp/dpu1/dpu_encoder.c: dpu_encoder_helper_wait_for_irq under the commit's wait_for_commit_done.
#[test]
fn msm_commit_waits_for_the_encoder_interrupt() {
    check(
        MSM_DPU_IRQ,
        &["[display interrupt wait (msm)"],
        &["[display interrupt wait (msm)"],
        &[],
    );
}

/// drivers/gpu/drm/msm/msm_atomic.c: lock_crtcs (inlined) takes kms->commit_lock[].
#[test]
fn msm_commit_tail_waits_for_the_crtc_commit_lock() {
    check(
        MSM_COMMIT_LOCK,
        &["mutex wait on the msm KMS per-CRTC commit_lock"],
        &["mutex wait on the msm KMS per-CRTC commit_lock"],
        &[],
    );
}

/// drivers/gpu/drm/msm/adreno/a6xx_hfi.c: the HFI message's ack poll.
#[test]
fn msm_gpu_resume_waits_for_the_gmu() {
    check(
        MSM_GMU,
        &["[GMU firmware reply (msm)"],
        &["[GMU firmware reply (msm)"],
        &[],
    );
}

/// drivers/gpu/drm/vc4/vc4_gem.c: vc4_wait_for_seqno.
#[test]
fn vc4_waits_for_the_job_seqno() {
    check(
        VC4_SEQNO,
        &["[GPU seqno wait (vc4)"],
        &["[GPU seqno wait (vc4)"],
        &[],
    );
}

/// drivers/gpu/drm/vc4/vc4_hdmi.c: the encoder's post_crtc_disable takes vc4_hdmi->mutex.
#[test]
fn vc4_hdmi_hooks_wait_for_the_encoder_mutex() {
    check(
        VC4_HDMI,
        &["mutex wait on the vc4 HDMI encoder's mutex"],
        &["mutex wait on the vc4 HDMI encoder's mutex"],
        &[],
    );
}

/// drivers/gpu/drm/vc4/vc4_gem.c, drivers/gpu/drm/i915/gem/i915_gem_object.h: the submit's ww_mutex on each BO's dma_resv.
#[test]
fn vc4_and_i915_submit_wait_for_a_buffer_reservation() {
    check(
        VC4_BO_RESV,
        &["mutex wait on a buffer's dma_resv lock"],
        &["mutex wait on a buffer's dma_resv lock"],
        &[],
    );
    check(
        I915_BO_RESV,
        &["mutex wait on a buffer's dma_resv lock"],
        &["mutex wait on a buffer's dma_resv lock"],
        &[],
    );
}

/// drivers/gpu/drm/v3d/v3d_gem.c: v3d_clean_caches takes cache_clean_lock.
#[test]
fn v3d_cache_clean_waits_for_its_lock() {
    check(
        V3D_CACHE_CLEAN,
        &["mutex wait on the v3d cache_clean_lock"],
        &["mutex wait on the v3d cache_clean_lock"],
        &[],
    );
}

/// drivers/gpu/drm/virtio/virtgpu_ioctl.c: virtio_gpu_get_caps_ioctl's wait on resp_wq; built in, the driver comes from
/// the layer map.
#[test]
fn virtio_gpu_capset_query_waits_for_the_host() {
    check(
        VIRTIO_CAPS,
        &["[virtio-gpu host response (virtio_gpu)"],
        &["[virtio-gpu host response (virtio_gpu)"],
        &[],
    );
    check(
        VIRTIO_CAPS_BUILTIN,
        &["[virtio-gpu host response (virtio_gpu)"],
        &["[virtio-gpu host response (virtio_gpu)"],
        &[],
    );
}

/// drivers/gpu/drm/nouveau/nvkm/subdev/gsp/r535.c: r535_gsp_msgq_wait's poll.
#[test]
fn nouveau_gsp_rpc_waits_for_the_firmware() {
    check(
        NOUVEAU_GSP,
        &["[GSP RPC wait (nouveau)"],
        &["[GSP RPC wait (nouveau)"],
        &[],
    );
}

/// drivers/gpu/drm/nouveau/dispnv50/disp.c: nv50_disp_atomic_commit_core's notifier poll.
#[test]
fn nouveau_commit_polls_the_display_notifier() {
    check(
        NOUVEAU_NTFY,
        &["[display notifier poll (nouveau)"],
        &["[display notifier poll (nouveau)"],
        &["not visible"],
    );
}

/// drivers/gpu/drm/nouveau/nouveau_abi16.c: nouveau_abi16_get takes cli->mutex.
#[test]
fn nouveau_abi16_waits_for_the_client_mutex() {
    check(
        NOUVEAU_CLI,
        &["mutex wait on the nouveau client's cli->mutex"],
        &["mutex wait on the nouveau client's cli->mutex"],
        &[],
    );
}

/// drivers/gpu/drm/amd/amdgpu/amdgpu_reset.c: amdgpu_device_lock_reset_domain's down_write.
#[test]
fn amdgpu_reset_waits_for_the_reset_domain() {
    check(
        AMDGPU_RESET_DOMAIN,
        &[
            "rwsem wait (write) on the amdgpu reset domain's rwsem",
            "[GPU recovery (amdgpu)]",
        ],
        &[
            "rwsem wait (write) on the amdgpu reset domain's rwsem",
            "[GPU recovery (amdgpu)]",
        ],
        &[],
    );
}

/// drivers/gpu/drm/amd/pm/swsmu/smu_cmn.c: smu->message_lock around the SMU message.
#[test]
fn amdgpu_smu_message_waits_for_the_message_lock() {
    check(
        AMDGPU_SMU,
        &["mutex wait on the SMU's message_lock"],
        &["mutex wait on the SMU's message_lock"],
        &[],
    );
}

/// drivers/gpu/drm/amd/amdgpu/amdgpu_psp.c: psp_cmd_submit_buf's fence poll.
#[test]
fn amdgpu_psp_command_waits_for_the_firmware() {
    check(
        AMDGPU_PSP,
        &["[PSP command (amdgpu)"],
        &["[PSP command (amdgpu)"],
        &["not visible"],
    );
}

/// drivers/gpu/drm/amd/amdkfd/kfd_device_queue_manager.c: dqm_lock in evict_process_queues_cpsch.
#[test]
fn kfd_eviction_waits_for_the_queue_manager_lock() {
    check(
        KFD_DQM,
        &["mutex wait on the KFD device queue manager's lock"],
        &["mutex wait on the KFD device queue manager's lock"],
        &[],
    );
}

/// drivers/gpu/drm/i915/gt/uc/intel_guc_ct.c, drivers/gpu/drm/xe/xe_guc_ct.c: the H2G request's wait for its reply.
#[test]
fn i915_and_xe_guc_requests_wait_for_the_guc() {
    check(
        I915_GUC,
        &["[GuC firmware reply (i915)"],
        &["[GuC firmware reply (i915)"],
        &[],
    );
    check(
        XE_GUC,
        &["[GuC firmware reply (xe)"],
        &["[GuC firmware reply (xe)"],
        &[],
    );
    // Built in (no module tags): the driver comes from the function prefixes; xe's `guc_ct_send_recv`, which
    // the 6.1 layer map knows as i915's, is not tagged i915 in a stack whose own names say xe.
    check(
        I915_GUC_BUILTIN,
        &["[GuC firmware reply (i915)"],
        &["[GuC firmware reply (i915)"],
        &[],
    );
    check(
        XE_GUC_BUILTIN,
        &["[GuC firmware reply (xe)"],
        &["[GuC firmware reply (xe)"],
        &["i915"],
    );
}

/// drivers/gpu/drm/xe/xe_exec.c: xe_exec_ioctl's down_read_interruptible(&vm->lock).
#[test]
fn xe_exec_waits_for_the_vm_lock() {
    check(
        XE_VM_LOCK,
        &["rwsem wait (read) on the xe VM's vm->lock"],
        &["rwsem wait on the xe VM's vm->lock"],
        &[],
    );
}

/// drivers/gpu/drm/i915/gt/intel_reset.c: intel_gt_reset takes gt->reset.mutex.
#[test]
fn i915_reset_waits_for_the_reset_mutex() {
    check(
        I915_RESET,
        &["mutex wait on the GT's reset.mutex"],
        &["mutex wait on the GT's reset.mutex"],
        &[],
    );
}

/// drivers/gpu/drm/display/drm_dp_mst_topology.c: drm_dp_mst_wait_tx_reply.
#[test]
fn dp_mst_probe_waits_for_the_sideband_reply() {
    check(
        DP_MST,
        &["[DP MST sideband message"],
        &["[DP MST sideband message"],
        &[],
    );
}

/// A kthread's nvkms_read_lock_pm_lock (down_read on nvkms_pm_lock) before the ioctl: the PM semaphore in a dump.
/// `/proc` omits `down_read` and cannot tell it from the nvkms lock (the wait graph's kernel record can).
#[test]
fn nvidia_modeset_kthread_waits_for_the_pm_lock() {
    let [d, _] = sites(NVKMS_PM_WAITER);
    assert!(
        d.contains("rwsem wait (read) [nvidia-modeset PM semaphore]"),
        "{d:?}"
    );
}

/// nvidia-drm's commit → NVKMS (nvkms_lock held) → nvkms_call_rm → the proprietary RM, waiting for the RM API lock.
const NVKMS_HOLDER_PROPRIETARY: &str = "__schedule < schedule < rwsem_down_write_slowpath < down_write < os_acquire_rwlock_write [nvidia] < _nv012345rm [nvidia] < _nv045678rm [nvidia] < rm_kernel_rmapi_op [nvidia] < nvkms_call_rm [nvidia_modeset] < _nv002345kms [nvidia_modeset] < nvkms_ioctl_common [nvidia_modeset] < nvkms_ioctl_from_kapi_try_pmlock [nvidia_modeset] < nv_drm_atomic_apply_modeset_config [nvidia_drm] < nv_drm_atomic_commit [nvidia_drm] < drm_atomic_commit [drm] < drm_mode_atomic_ioctl [drm] < drm_ioctl_kernel [drm] < drm_ioctl [drm] < __x64_sys_ioctl < do_syscall_64 < entry_SYSCALL_64_after_hwframe";

/// The same RM call from NVKMS with only obfuscated RM frames inner to it.
const NVKMS_HOLDER_GSP: &str = "_nv012345rm [nvidia] < _nv045678rm [nvidia] < rm_kernel_rmapi_op [nvidia] < nvkms_call_rm [nvidia_modeset] < nvRmApiControl [nvidia_modeset] < nvKmsIoctl [nvidia_modeset] < nvkms_ioctl_from_kapi [nvidia_modeset] < nv_drm_atomic_apply_modeset_config [nvidia_drm] < nv_drm_atomic_commit [nvidia_drm] < drm_atomic_commit [drm] < drm_mode_atomic_ioctl [drm] < drm_ioctl_kernel [drm] < drm_ioctl [drm] < __x64_sys_ioctl < do_syscall_64 < entry_SYSCALL_64_after_hwframe";

/// nvidia-drm's atomic check waiting for nvkms_lock (down in nvkms_ioctl_common, inlined).
const NVKMS_WAITER: &str = "__schedule < schedule < schedule_timeout < __down_common < down < nvkms_ioctl_from_kapi_try_pmlock [nvidia_modeset] < ApplyModeSetConfig [nvidia_modeset] < nv_drm_atomic_apply_modeset_config [nvidia_drm] < nv_drm_atomic_check [nvidia_drm] < drm_atomic_check_only [drm] < drm_atomic_commit [drm] < drm_mode_atomic_ioctl [drm] < drm_ioctl_kernel [drm] < drm_ioctl [drm] < __x64_sys_ioctl < do_syscall_64 < entry_SYSCALL_64_after_hwframe";

/// nvidia-modeset's kthread (PF_NOFREEZE) waiting for nvkms_pm_lock (down_read) before an ioctl.
const NVKMS_PM_WAITER: &str = "__schedule < schedule < rwsem_down_read_slowpath < down_read < nvkms_ioctl_from_kapi [nvidia_modeset] < nvKmsKapiHandleEventQueueChange [nvidia_modeset] < nvkms_kapi_event_kthread_q_callback [nvidia_modeset] < _main_loop [nvidia_modeset] < kthread < ret_from_fork";

/// nv_drm_atomic_commit waiting on flip_event_wq.
const NV_DRM_FLIP: &str = "__schedule < schedule < schedule_timeout < nv_drm_atomic_commit [nvidia_drm] < drm_atomic_commit [drm] < drm_mode_atomic_ioctl [drm] < drm_ioctl_kernel [drm] < drm_ioctl [drm] < __x64_sys_ioctl < do_syscall_64 < entry_SYSCALL_64_after_hwframe";

/// nvidia-uvm's release flushing its kthread queue.
const NV_KTHREAD_Q_FLUSH: &str = "__schedule < schedule < schedule_timeout < __wait_for_common < wait_for_completion < nv_kthread_q_flush [nvidia_uvm] < uvm_va_space_destroy [nvidia_uvm] < uvm_release [nvidia_uvm] < uvm_release_entry [nvidia_uvm] < __fput < task_work_run < do_exit < do_group_exit < __x64_sys_exit_group < do_syscall_64";

/// Opening /dev/nvidiactl: nvidia_ctl_open's down(&nvl->ldata_lock).
const NV_LDATA_LOCK: &str = "__schedule < schedule < schedule_timeout < __down_common < down < nvidia_ctl_open [nvidia] < nvidia_open [nvidia] < chrdev_open < do_dentry_open < vfs_open < path_openat < do_filp_open < do_sys_openat2 < __x64_sys_openat < do_syscall_64";

/// msm's commit tail waiting for the video encoder's commit-done interrupt.
const MSM_DPU_IRQ: &str = "__schedule < schedule < schedule_timeout < dpu_encoder_helper_wait_event_timeout [msm] < dpu_encoder_helper_wait_for_irq [msm] < dpu_encoder_phys_vid_wait_for_commit_done [msm] < dpu_kms_wait_for_commit_done [msm] < msm_atomic_commit_tail [msm] < commit_tail [drm_kms_helper] < drm_atomic_helper_commit [drm_kms_helper] < drm_atomic_commit [drm] < drm_mode_atomic_ioctl [drm] < drm_ioctl_kernel [drm] < drm_ioctl [drm] < __x64_sys_ioctl < do_syscall_64 < entry_SYSCALL_64_after_hwframe";

/// msm's commit work waiting for a CRTC's commit_lock.
const MSM_COMMIT_LOCK: &str = "__schedule < schedule < __mutex_lock < mutex_lock < msm_atomic_commit_tail [msm] < commit_tail [drm_kms_helper] < commit_work [drm_kms_helper] < process_one_work < worker_thread < kthread < ret_from_fork";

/// An a6xx GPU resumed for a job, waiting for the GMU's HFI ack.
const MSM_GMU: &str = "__schedule < schedule < schedule_hrtimeout_range < usleep_range_state < a6xx_hfi_wait_for_ack [msm] < a6xx_hfi_send_msg [msm] < a6xx_gmu_resume [msm] < a6xx_pm_resume [msm] < adreno_runtime_resume [msm] < __rpm_callback < rpm_callback < rpm_resume < __pm_runtime_resume < msm_gpu_submit [msm] < msm_job_run [msm] < drm_sched_run_job_work [gpu_sched] < process_one_work < worker_thread < kthread < ret_from_fork";

/// DRM_IOCTL_VC4_WAIT_BO waiting for the job's seqno.
const VC4_SEQNO: &str = "__schedule < schedule < schedule_timeout < vc4_wait_for_seqno [vc4] < vc4_wait_for_seqno_ioctl_helper [vc4] < vc4_wait_bo_ioctl [vc4] < drm_ioctl_kernel [drm] < drm_ioctl [drm] < __x64_sys_ioctl < do_syscall_64 < entry_SYSCALL_64_after_hwframe";

/// A modeset's CRTC disable waiting for the HDMI encoder's mutex.
const VC4_HDMI: &str = "__schedule < schedule < __mutex_lock < mutex_lock < vc4_hdmi_encoder_post_crtc_disable [vc4] < vc4_crtc_disable [vc4] < vc4_crtc_atomic_disable [vc4] < drm_atomic_helper_commit_modeset_disables [drm_kms_helper] < vc4_atomic_commit_tail [vc4] < commit_tail [drm_kms_helper] < drm_atomic_helper_commit [drm_kms_helper] < drm_atomic_commit [drm] < drm_mode_atomic_ioctl [drm] < drm_ioctl_kernel [drm] < drm_ioctl [drm] < __x64_sys_ioctl < do_syscall_64 < entry_SYSCALL_64_after_hwframe";

/// vc4's submit waiting for a BO's reservation.
const VC4_BO_RESV: &str = "__schedule < schedule < __ww_mutex_lock < ww_mutex_lock_interruptible < vc4_lock_bo_reservations [vc4] < vc4_submit_cl_ioctl [vc4] < drm_ioctl_kernel [drm] < drm_ioctl [drm] < __x64_sys_ioctl < do_syscall_64 < entry_SYSCALL_64_after_hwframe";

/// v3d's cache-clean job waiting for cache_clean_lock.
const V3D_CACHE_CLEAN: &str = "__schedule < schedule < __mutex_lock < mutex_lock < v3d_clean_caches [v3d] < v3d_cache_clean_job_run [v3d] < drm_sched_run_job_work [gpu_sched] < process_one_work < worker_thread < kthread < ret_from_fork";

/// DRM_IOCTL_VIRTGPU_GET_CAPS waiting for the host's capset response.
const VIRTIO_CAPS: &str = "__schedule < schedule < schedule_timeout < virtio_gpu_get_caps_ioctl [virtio_gpu] < drm_ioctl_kernel [drm] < drm_ioctl [drm] < __x64_sys_ioctl < do_syscall_64 < entry_SYSCALL_64_after_hwframe";

/// The same, virtio-gpu built into the kernel (no module tags).
const VIRTIO_CAPS_BUILTIN: &str = "__schedule < schedule < schedule_timeout < virtio_gpu_get_caps_ioctl < drm_ioctl_kernel < drm_ioctl < __x64_sys_ioctl < do_syscall_64";

/// nouveau's hotplug work in a GSP RPC (r535), polling for the reply.
const NOUVEAU_GSP: &str = "__schedule < schedule < schedule_hrtimeout_range < usleep_range_state < r535_gsp_msgq_wait [nouveau] < r535_gsp_msg_recv [nouveau] < r535_gsp_rpc_push [nouveau] < r535_gsp_rpc_rm_ctrl_push [nouveau] < nouveau_display_hpd_work [nouveau] < process_one_work < worker_thread < kthread < ret_from_fork";

/// nouveau's commit work polling the core channel's notifier.
const NOUVEAU_NTFY: &str = "__schedule < schedule < schedule_hrtimeout_range < usleep_range_state < nv50_disp_atomic_commit_core [nouveau] < nv50_disp_atomic_commit_tail [nouveau] < nv50_disp_atomic_commit_work [nouveau] < process_one_work < worker_thread < kthread < ret_from_fork";

/// A nouveau channel allocation waiting for the client's mutex.
const NOUVEAU_CLI: &str = "__schedule < schedule < __mutex_lock < mutex_lock < nouveau_abi16_get [nouveau] < nouveau_abi16_ioctl_channel_alloc [nouveau] < drm_ioctl_kernel [drm] < drm_ioctl [drm] < __x64_sys_ioctl < do_syscall_64 < entry_SYSCALL_64_after_hwframe";

/// amdgpu's job timeout → GPU recovery taking the reset domain's rwsem.
const AMDGPU_RESET_DOMAIN: &str = "__schedule < schedule < rwsem_down_write_slowpath < down_write < amdgpu_device_lock_reset_domain [amdgpu] < amdgpu_device_gpu_recover [amdgpu] < amdgpu_job_timedout [amdgpu] < drm_sched_job_timedout [gpu_sched] < process_one_work < worker_thread < kthread < ret_from_fork";

/// amdgpu's power-profile work waiting for the SMU's message_lock.
const AMDGPU_SMU: &str = "__schedule < schedule < __mutex_lock < mutex_lock < smu_cmn_send_smc_msg_with_param [amdgpu] < smu_switch_power_profile [amdgpu] < amdgpu_dpm_switch_power_profile [amdgpu] < amdgpu_gfx_profile_idle_work_handler [amdgpu] < process_one_work < worker_thread < kthread < ret_from_fork";

/// amdgpu's runtime suspend in a PSP command, polling for its fence.
const AMDGPU_PSP: &str = "__schedule < schedule < schedule_hrtimeout_range < usleep_range_state < psp_cmd_submit_buf [amdgpu] < psp_ta_unload [amdgpu] < psp_hdcp_terminate [amdgpu] < psp_suspend [amdgpu] < amdgpu_device_ip_suspend_phase2 [amdgpu] < amdgpu_device_suspend [amdgpu] < amdgpu_pmops_runtime_suspend [amdgpu] < pci_pm_runtime_suspend < __rpm_callback < rpm_callback < rpm_suspend < pm_runtime_work < process_one_work < worker_thread < kthread < ret_from_fork";

/// A userptr eviction (MMU notifier) waiting for the KFD queue manager's lock.
const KFD_DQM: &str = "__schedule < schedule < __mutex_lock < mutex_lock < evict_process_queues_cpsch [amdgpu] < kfd_process_evict_queues [amdgpu] < kgd2kfd_quiesce_mm [amdgpu] < amdgpu_amdkfd_evict_userptr [amdgpu] < amdgpu_hmm_invalidate_hsa [amdgpu] < __mmu_notifier_invalidate_range_start < try_to_migrate_one < rmap_walk_anon < try_to_migrate < migrate_pages < kcompactd < kthread < ret_from_fork";

/// A sysfs write of the SLPC min frequency waiting for the GuC's reply.
const I915_GUC: &str = "__schedule < schedule < schedule_hrtimeout_range < usleep_range_state < wait_for_ct_request_update [i915] < ct_send [i915] < intel_guc_ct_send [i915] < intel_guc_slpc_set_min_freq [i915] < set_min_freq [i915] < kernfs_fop_write_iter < vfs_write < ksys_write < do_syscall_64 < entry_SYSCALL_64_after_hwframe";

/// The same, i915 built into the kernel (no module tags).
const I915_GUC_BUILTIN: &str = "__schedule < schedule < schedule_hrtimeout_range < usleep_range_state < wait_for_ct_request_update < ct_send < intel_guc_ct_send < intel_guc_slpc_set_min_freq < kernfs_fop_write_iter < vfs_write < ksys_write < do_syscall_64";

/// xe's equivalent: guc_ct_send_recv waiting on g2h_fence_wq.
const XE_GUC: &str = "__schedule < schedule < schedule_timeout < guc_ct_send_recv [xe] < xe_guc_ct_send_recv [xe] < pc_action_set_param [xe] < xe_guc_pc_set_min_freq [xe] < kernfs_fop_write_iter < vfs_write < ksys_write < do_syscall_64";

/// The same xe request built in (no module tags).
const XE_GUC_BUILTIN: &str = "__schedule < schedule < schedule_timeout < guc_ct_send_recv < xe_guc_ct_send_recv < pc_action_set_param < xe_guc_pc_set_min_freq < kernfs_fop_write_iter < vfs_write < ksys_write < do_syscall_64";

/// DRM_IOCTL_XE_EXEC waiting for the VM's vm->lock.
const XE_VM_LOCK: &str = "__schedule < schedule < rwsem_down_read_slowpath < down_read_interruptible < xe_exec_ioctl [xe] < drm_ioctl_kernel [drm] < drm_ioctl [drm] < __x64_sys_ioctl < do_syscall_64 < entry_SYSCALL_64_after_hwframe";

/// A forced reset (i915_wedged debugfs) waiting for gt->reset.mutex.
const I915_RESET: &str = "__schedule < schedule < __mutex_lock < mutex_lock < intel_gt_reset [i915] < intel_gt_handle_error [i915] < i915_wedged_set [i915] < simple_attr_write < full_proxy_write < vfs_write < ksys_write < do_syscall_64";

/// i915's execbuffer waiting for a BO's reservation (i915_gem_object_lock).
const I915_BO_RESV: &str = "__schedule < schedule < __ww_mutex_lock < ww_mutex_lock_interruptible < __i915_gem_object_lock [i915] < i915_gem_object_lock [i915] < eb_validate_vmas [i915] < i915_gem_do_execbuffer [i915] < i915_gem_execbuffer2_ioctl [i915] < drm_ioctl_kernel [drm] < drm_ioctl [drm] < __x64_sys_ioctl < do_syscall_64 < entry_SYSCALL_64_after_hwframe";

/// DP MST link probing waiting for a LINK_ADDRESS sideband reply.
const DP_MST: &str = "__schedule < schedule < schedule_timeout < drm_dp_mst_wait_tx_reply [drm_display_helper] < drm_dp_send_link_address [drm_display_helper] < drm_dp_check_and_send_link_address [drm_display_helper] < drm_dp_mst_link_probe_work [drm_display_helper] < process_one_work < worker_thread < kthread < ret_from_fork";

/// kernel-open/nvidia-modeset/nvidia-modeset-linux.c: nvkms_close_pm_locked waits for nvkms_lock (down), and
/// after releasing it flushes the kthread queue: a waiter, then a flush (no longer the lock).
#[test]
fn nvidia_modeset_close_waits_for_the_lock_then_the_queue() {
    check(
        NVKMS_CLOSE_WAITER,
        &["[nvidia-modeset global lock]"],
        &["[nvidia-modeset global lock]"],
        &[],
    );
    check(
        NVKMS_CLOSE_FLUSH,
        &["[kthread queue flush (nvidia_modeset)"],
        &["[kthread queue flush (nvidia_modeset)"],
        &["global lock"],
    );
}

/// kernel-open/nvidia/nv.c: a system suspend's down_write(&nv_system_pm_lock).
#[test]
fn nvidia_system_suspend_waits_for_the_pm_lock() {
    check(
        NV_SYSTEM_PM,
        &["rwsem wait (write) on the NVIDIA system PM lock"],
        &["rwsem wait on the NVIDIA system PM lock"],
        &[],
    );
}

/// drivers/gpu/drm/msm/dsi/dsi_host.c (the panel's DCS command) and mdp5_crtc.c (the commit's flush wait).
#[test]
fn msm_dsi_command_and_mdp5_commit_wait_for_their_interrupts() {
    check(
        MSM_DSI,
        &["[DSI command transfer (msm)"],
        &["[DSI command transfer (msm)"],
        &[],
    );
    check(
        MSM_MDP5,
        &["[display interrupt wait (msm)"],
        &["[display interrupt wait (msm)"],
        &[],
    );
}

/// drivers/gpu/drm/v3d/v3d_mmu.c: the MMU TLB flush's register poll.
#[test]
fn v3d_mmu_flush_polls_the_gpu() {
    check(
        V3D_MMU_FLUSH,
        &["[hardware poll (v3d)"],
        &["[hardware poll (v3d)"],
        &[],
    );
}

/// drivers/gpu/drm/amd/display/amdgpu_dm/amdgpu_dm.c: a hotplug's link detection under dc_lock.
#[test]
fn amdgpu_dm_hotplug_waits_for_the_display_core_lock() {
    check(
        AMDGPU_DM_HPD,
        &["mutex wait on the amdgpu display core's dc_lock"],
        &["mutex wait on the amdgpu display core's dc_lock"],
        &[],
    );
}

/// drivers/gpu/drm/i915/display/intel_display_power.c and intel_psr.c; intel_wakeref.c's GT idle wait;
/// intel_guc_submission.c's idle wait.
#[test]
fn i915_display_power_psr_and_guc_idle() {
    check(
        I915_POWER,
        &["mutex wait on i915 display power domains' lock"],
        &["mutex wait on i915 display power domains' lock"],
        &[],
    );
    check(
        I915_PSR,
        &["mutex wait on the PSR lock"],
        &["mutex wait on the PSR lock"],
        &[],
    );
    check(
        I915_GT_IDLE,
        &["[GT idle wait (i915)"],
        &["[GT idle wait (i915)"],
        &["not visible"],
    );
    check(
        I915_GUC_IDLE,
        &["[GuC firmware reply (i915)"],
        &["[GuC firmware reply (i915)"],
        &[],
    );
}

/// Waits the tables named before issue 38's GPU rows, from the same drivers' source: i915's commit fence wait
/// (intel_display.c), amdgpu's fence drain at suspend (amdgpu_fence.c), panfrost's and lima's teardown of a
/// context's scheduler entity, lima's BO wait; etnaviv's fence-number wait is the new seqno row.
#[test]
fn already_named_gpu_waits_and_etnaviv() {
    check(
        I915_COMMIT_FENCE,
        &["[GPU fence wait (i915)]"],
        &["[GPU fence wait (i915)]"],
        &[],
    );
    check(
        AMDGPU_FENCE_DRAIN,
        &["[GPU fence wait (amdgpu)]"],
        &["[GPU fence wait (amdgpu)]"],
        &[],
    );
    check(
        PANFROST_CLOSE,
        &["[GPU scheduler entity drain (panfrost)"],
        &["[GPU scheduler entity drain (panfrost)"],
        &[],
    );
    check(
        LIMA_WAIT,
        &["[GPU fence wait (lima)]"],
        &["[GPU fence wait (lima)]"],
        &[],
    );
    check(
        ETNAVIV_WAIT,
        &["[GPU seqno wait (etnaviv)"],
        &["[GPU seqno wait (etnaviv)"],
        &[],
    );
}

/// drivers/gpu/drm/drm_vblank_work.c under i915's commit; kernel-open/nvidia/nv.c's deferred close.
#[test]
fn vblank_work_flush_and_nvidia_deferred_open() {
    check(
        I915_VBLANK_WORK,
        &["[vblank work flush (i915)"],
        &["[vblank work flush (i915)"],
        &[],
    );
    check(
        NV_DEFERRED_CLOSE,
        &["[deferred open (nvidia)"],
        &["[deferred open (nvidia)"],
        &["not visible"],
    );
}

/// drivers/gpu/drm/drm_auth.c, drm_prime.c; amdgpu_gfx.c's GFXOFF mutex; mxgpu_nv.c's mailbox poll.
#[test]
fn drm_master_prime_gfxoff_and_sriov_mailbox() {
    check(
        DRM_SETMASTER,
        &["mutex wait on dev->master_mutex (DRM master)"],
        &["mutex wait on dev->master_mutex (DRM master)"],
        &[],
    );
    check(
        DRM_PRIME_IMPORT,
        &["mutex wait on the DRM file's prime.lock"],
        &["mutex wait on the DRM file's prime.lock"],
        &[],
    );
    check(
        AMDGPU_GFXOFF,
        &["mutex wait on amdgpu's gfx_off_mutex"],
        &["mutex wait on amdgpu's gfx_off_mutex"],
        &[],
    );
    check(
        AMDGPU_SRIOV,
        &["[SR-IOV mailbox (amdgpu)"],
        &["[SR-IOV mailbox (amdgpu)"],
        &["not visible"],
    );
}

/// A compositor taking DRM master (DRM_IOCTL_SET_MASTER).
const DRM_SETMASTER: &str = "__schedule < schedule < __mutex_lock < mutex_lock < drm_setmaster_ioctl [drm] < drm_ioctl_kernel [drm] < drm_ioctl [drm] < __x64_sys_ioctl < do_syscall_64 < entry_SYSCALL_64_after_hwframe";

/// DRM_IOCTL_PRIME_FD_TO_HANDLE through amdgpu.
const DRM_PRIME_IMPORT: &str = "__schedule < schedule < __mutex_lock < mutex_lock < drm_gem_prime_fd_to_handle [drm] < drm_prime_fd_to_handle_ioctl [drm] < drm_ioctl_kernel [drm] < drm_ioctl [drm] < amdgpu_drm_ioctl [amdgpu] < __x64_sys_ioctl < do_syscall_64 < entry_SYSCALL_64_after_hwframe";

/// Writing amdgpu's debugfs GFXOFF switch (amdgpu_gfx_off_ctrl's mutex).
const AMDGPU_GFXOFF: &str = "__schedule < schedule < __mutex_lock < mutex_lock < amdgpu_gfx_off_ctrl [amdgpu] < amdgpu_debugfs_gfxoff_write [amdgpu] < full_proxy_write < vfs_write < ksys_write < do_syscall_64 < entry_SYSCALL_64_after_hwframe";

/// An SR-IOV virtual function asking the host for full GPU access at init (xgpu_nv_poll_msg's msleep).
const AMDGPU_SRIOV: &str = "__schedule < schedule < schedule_timeout < msleep < xgpu_nv_poll_msg [amdgpu] < xgpu_nv_send_access_requests [amdgpu] < xgpu_nv_request_full_gpu_access [amdgpu] < amdgpu_virt_request_full_gpu [amdgpu] < amdgpu_device_init [amdgpu] < amdgpu_driver_load_kms [amdgpu] < amdgpu_pci_probe [amdgpu] < local_pci_probe < work_for_cpu_fn < process_one_work < worker_thread < kthread < ret_from_fork";

/// i915's commit tail flushing the CRTC's vblank workers (drm_vblank_work_flush_all).
const I915_VBLANK_WORK: &str = "__schedule < schedule < drm_vblank_work_flush_all [drm] < intel_wait_for_vblank_workers [i915] < intel_atomic_commit_tail [i915] < intel_atomic_commit_work [i915] < process_one_work < worker_thread < kthread < ret_from_fork";

/// The last close of a GPU's device file whose open has not completed: nvidia_close_deferred's
/// nv_wait_open_complete (inlined) → wait_for_completion.
const NV_DEFERRED_CLOSE: &str = "__schedule < schedule < schedule_timeout < __wait_for_common < wait_for_completion < nvidia_close_deferred [nvidia] < nvidia_close [nvidia] < __fput < task_work_run < do_exit < do_group_exit < get_signal < arch_do_signal_or_restart < syscall_exit_to_user_mode < do_syscall_64";

/// nvidia-drm's device teardown closing its NVKMS client: nvkms_close_pm_locked's down(&nvkms_lock).
const NVKMS_CLOSE_WAITER: &str = "__schedule < schedule < schedule_timeout < __down_common < down < nvkms_close_pm_locked [nvidia_modeset] < nvkms_close_pm_unlocked [nvidia_modeset] < nvkms_close_from_kapi [nvidia_modeset] < nvKmsKapiFreeDevice [nvidia_modeset] < nv_drm_dev_unload [nvidia_drm] < nv_drm_remove [nvidia_drm] < nv_drm_remove_devices [nvidia_drm] < nv_drm_exit [nvidia_drm] < __do_sys_delete_module < do_syscall_64";

/// The same close after nvKmsClose: the kthread queue's flush (nv_kthread_q_flush → wait_for_completion).
const NVKMS_CLOSE_FLUSH: &str = "__schedule < schedule < schedule_timeout < __wait_for_common < wait_for_completion < nv_kthread_q_flush [nvidia_modeset] < nvkms_close_pm_locked [nvidia_modeset] < nvkms_close_pm_unlocked [nvidia_modeset] < nvkms_close_from_kapi [nvidia_modeset] < nvKmsKapiFreeDevice [nvidia_modeset] < nv_drm_dev_unload [nvidia_drm] < nv_drm_remove [nvidia_drm] < __do_sys_delete_module < do_syscall_64";

/// A system suspend through the NVIDIA driver's PM callback: nv_set_system_power_state's down_write.
const NV_SYSTEM_PM: &str = "__schedule < schedule < rwsem_down_write_slowpath < down_write < nv_set_system_power_state [nvidia] < nv_pmops_suspend [nvidia] < pci_pm_suspend < dpm_run_callback < __device_suspend < async_suspend < async_run_entry_fn < process_one_work < worker_thread < kthread < ret_from_fork";

/// A DSI panel's DCS command: dsi_cmd_dma_tx waiting for the command DMA done interrupt.
const MSM_DSI: &str = "__schedule < schedule < schedule_timeout < __wait_for_common < wait_for_completion_timeout < dsi_cmd_dma_tx [msm] < dsi_cmds2buf_tx [msm] < msm_dsi_host_cmd_tx [msm] < dsi_host_transfer [msm] < mipi_dsi_dcs_write_buffer [drm] < mipi_dsi_dcs_set_display_on [drm] < panel_prepare [panel_simple] < drm_panel_prepare [drm] < dsi_mgr_bridge_pre_enable [msm] < drm_atomic_bridge_chain_pre_enable [drm] < msm_atomic_commit_tail [msm] < commit_tail [drm_kms_helper] < commit_work [drm_kms_helper] < process_one_work < worker_thread < kthread < ret_from_fork";

/// An mdp5 commit: mdp5_crtc_wait_for_commit_done under msm_atomic_wait_for_commit_done.
const MSM_MDP5: &str = "__schedule < schedule < schedule_timeout < mdp5_crtc_wait_for_commit_done [msm] < mdp5_kms_wait_for_commit_done [msm] < msm_atomic_wait_for_commit_done [msm] < msm_atomic_commit_tail [msm] < commit_tail [drm_kms_helper] < commit_work [drm_kms_helper] < process_one_work < worker_thread < kthread < ret_from_fork";

/// A v3d BO's unmap flushing the GPU MMU's TLB (v3d_mmu_flush_all's poll).
const V3D_MMU_FLUSH: &str = "__schedule < schedule < schedule_hrtimeout_range < usleep_range_state < v3d_mmu_flush_all [v3d] < v3d_mmu_remove_ptes [v3d] < v3d_free_object [v3d] < drm_gem_object_free [drm] < drm_gem_object_handle_put_unlocked [drm] < drm_gem_object_release_handle [drm] < drm_gem_handle_delete [drm] < drm_gem_close_ioctl [drm] < drm_ioctl_kernel [drm] < drm_ioctl [drm] < __arm64_sys_ioctl < invoke_syscall < el0_svc_common < do_el0_svc < el0_svc";

/// amdgpu's hotplug interrupt work: handle_hpd_irq_helper's mutex.
const AMDGPU_DM_HPD: &str = "__schedule < schedule < __mutex_lock < mutex_lock < handle_hpd_irq_helper [amdgpu] < handle_hpd_irq [amdgpu] < dm_irq_work_func [amdgpu] < process_one_work < worker_thread < kthread < ret_from_fork";

/// i915's connector detect getting a display power domain.
const I915_POWER: &str = "__schedule < schedule < __mutex_lock < mutex_lock < intel_display_power_get [i915] < intel_dp_detect [i915] < drm_helper_probe_detect_ctx [drm_kms_helper] < output_poll_execute [drm_kms_helper] < process_one_work < worker_thread < kthread < ret_from_fork";

/// i915's PSR work waiting for the PSR lock.
const I915_PSR: &str = "__schedule < schedule < __mutex_lock < mutex_lock < intel_psr_work [i915] < process_one_work < worker_thread < kthread < ret_from_fork";

/// i915's GT suspend waiting for the GuC's outstanding replies (intel_guc_wait_for_idle).
const I915_GUC_IDLE: &str = "__schedule < schedule < schedule_timeout < intel_guc_wait_for_pending_msg [i915] < intel_guc_wait_for_idle [i915] < intel_uc_suspend [i915] < intel_gt_suspend_prepare [i915] < i915_drm_prepare [i915] < pci_pm_prepare < dpm_prepare < dpm_suspend_start < suspend_devices_and_enter < pm_suspend < state_store < kernfs_fop_write_iter < vfs_write < ksys_write < do_syscall_64";

/// i915's suspend waiting for the GT to park (intel_gt_pm_wait_for_idle, inlined, → intel_wakeref_wait_for_idle).
const I915_GT_IDLE: &str = "__schedule < schedule < intel_wakeref_wait_for_idle [i915] < intel_gt_suspend_late [i915] < i915_gem_suspend_late [i915] < i915_drm_suspend_late [i915] < pci_pm_suspend_late < dpm_run_callback < __device_suspend_late < async_suspend_late < async_run_entry_fn < process_one_work < worker_thread < kthread < ret_from_fork";

/// i915's commit waiting for its planes' fences (intel_atomic_commit_fence_wait).
const I915_COMMIT_FENCE: &str = "__schedule < schedule < intel_atomic_commit_fence_wait [i915] < intel_atomic_commit_tail [i915] < intel_atomic_commit_work [i915] < process_one_work < worker_thread < kthread < ret_from_fork";

/// amdgpu's suspend draining each ring's fences (amdgpu_fence_wait_empty → dma_fence_wait).
const AMDGPU_FENCE_DRAIN: &str = "__schedule < schedule < schedule_timeout < dma_fence_default_wait < dma_fence_wait_timeout < amdgpu_fence_wait_empty [amdgpu] < amdgpu_fence_driver_hw_fini [amdgpu] < amdgpu_device_suspend [amdgpu] < amdgpu_pmops_suspend [amdgpu] < pci_pm_suspend < dpm_run_callback < __device_suspend < async_suspend < async_run_entry_fn < process_one_work < worker_thread < kthread < ret_from_fork";

/// panfrost's file close destroying the context's scheduler entities.
const PANFROST_CLOSE: &str = "__schedule < schedule < schedule_timeout < drm_sched_entity_flush [gpu_sched] < drm_sched_entity_destroy [gpu_sched] < panfrost_job_close [panfrost] < panfrost_postclose [panfrost] < drm_file_free [drm] < drm_release [drm] < __fput < task_work_run < do_exit < do_group_exit < __arm64_sys_exit_group < invoke_syscall < el0_svc_common < do_el0_svc < el0_svc";

/// DRM_IOCTL_LIMA_GEM_WAIT: the BO's reservation fences.
const LIMA_WAIT: &str = "__schedule < schedule < schedule_timeout < dma_fence_default_wait < dma_resv_wait_timeout < lima_gem_wait [lima] < lima_ioctl_gem_wait [lima] < drm_ioctl_kernel [drm] < drm_ioctl [drm] < __arm64_sys_ioctl < invoke_syscall < el0_svc_common < do_el0_svc < el0_svc";

/// DRM_IOCTL_ETNAVIV_WAIT_FENCE: the GPU's completed fence number.
const ETNAVIV_WAIT: &str = "__schedule < schedule < schedule_timeout < etnaviv_gpu_wait_fence_interruptible [etnaviv] < etnaviv_ioctl_wait_fence [etnaviv] < drm_ioctl_kernel [drm] < drm_ioctl [drm] < __arm64_sys_ioctl < invoke_syscall < el0_svc_common < do_el0_svc < el0_svc";
