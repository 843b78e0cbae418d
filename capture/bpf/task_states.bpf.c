// SPDX-License-Identifier: GPL-2.0
/*
 * wedge-capture's per-thread change detection (capture/src/task_iter.rs): a BPF task iterator that
 * writes one 32-byte record per thread it visits. The agent attaches it limited to one process
 * (bpf_iter_link_info.task.pid, Linux >= 6.1) and reads it once per scan: a thread shown sleeping whose
 * switch count has not moved since the previous scan has not run since, so its `stat` is not read.
 *
 * Self-contained on purpose (no vmlinux.h, no libbpf headers): the three kernel structs below carry only
 * the fields read, marked preserve_access_index, so the loader relocates each field to the running
 * kernel's offset from its BTF (CO-RE). A kernel without one of them (`__state` is Linux >= 5.14)
 * refuses the load and the agent falls back to reading /proc.
 *
 * Built by gen_task_states.sh into task_states.bpf.o, which is checked in: building the project needs no
 * clang. Keep `struct thread_record` in step with RECORD_LEN and parse_records in task_iter.rs.
 */
typedef unsigned int __u32;
typedef unsigned long long __u64;

#define SEC(name) __attribute__((section(name), used))
#define CORE_RELOCATED __attribute__((preserve_access_index))

struct seq_file;

struct task_struct {
	int pid;
	int tgid;
	unsigned int __state;
	int exit_state;
	unsigned long nvcsw;
	unsigned long nivcsw;
} CORE_RELOCATED;

struct bpf_iter_meta {
	struct seq_file *seq;
} CORE_RELOCATED;

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
} CORE_RELOCATED;

/* Little-endian on both target arches (x86_64, aarch64); 32 bytes, no padding. */
struct thread_record {
	__u32 tid;
	__u32 tgid;
	__u32 state;      /* task_struct.__state, raw bits */
	__u32 exit_state; /* EXIT_ZOMBIE / EXIT_DEAD bits */
	__u64 nvcsw;      /* voluntary context switches */
	__u64 nivcsw;     /* involuntary context switches */
};

/* BPF_FUNC_seq_write, enum bpf_func_id in include/uapi/linux/bpf.h (stable UAPI number). */
static long (*bpf_seq_write)(struct seq_file *m, const void *data, __u32 len) = (void *)127;

SEC("iter/task")
int task_states(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct thread_record record;

	/* The iterator calls once more with task == NULL at the end. (Built without this check, as
	 * task_states_refused.bpf.o, the program is one the verifier refuses: the test of that fallback.) */
#ifndef WEDGE_TEST_VERIFIER_REFUSAL
	if (!task)
		return 0;
#endif
	record.tid = task->pid;
	record.tgid = task->tgid;
	record.state = task->__state;
	record.exit_state = task->exit_state;
	record.nvcsw = task->nvcsw;
	record.nivcsw = task->nivcsw;
	bpf_seq_write(ctx->meta->seq, &record, sizeof(record));
	return 0;
}

/* Task iterators read kernel memory through BTF pointers: GPL-only, as the kernel requires. */
char LICENSE[] SEC("license") = "GPL";
