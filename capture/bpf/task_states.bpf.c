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

/* enum bpf_field_info_kind (libbpf's bpf_core_read.h): a field's offset in the running kernel. */
#define FIELD_BYTE_OFFSET 0
#define field_offset(type, field) \
	((__u64)__builtin_preserve_field_info(((type *)0)->field, FIELD_BYTE_OFFSET))

struct seq_file;

struct list_head {
	struct list_head *next;
	struct list_head *prev;
};

struct signal_struct {
	struct list_head thread_head;
} CORE_RELOCATED;

struct task_struct {
	int pid;
	int tgid;
	unsigned int __state;
	int exit_state;
	unsigned long nvcsw;
	unsigned long nivcsw;
	struct list_head thread_node;
	struct signal_struct *signal;
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

/* BPF_FUNC_seq_write and BPF_FUNC_probe_read_kernel, enum bpf_func_id in include/uapi/linux/bpf.h
 * (stable UAPI numbers). */
static long (*bpf_seq_write)(struct seq_file *m, const void *data, __u32 len) = (void *)127;
static long (*bpf_probe_read_kernel)(void *dst, __u32 size, const void *unsafe_ptr) = (void *)113;

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

/*
 * The same answer for a whole thread group in one call (issue 40): the link is limited to the group's
 * leader (bpf_iter_link_info.task.tid), and this program walks the group's thread list itself, as
 * the kernel's own for_each_thread() does (signal->thread_head, each task's thread_node; the iterator
 * runs it under rcu_read_lock, which is what that list's readers need). The per-thread program above
 * costs the kernel a pid lookup (find_task_by_pid_ns), a pid-number translation (__task_pid_nr_ns), a
 * task reference and a seq_file round per thread; walking the list costs the fields read, each through
 * bpf_probe_read_kernel (a fault reads as an error and ends the walk, never a crash).
 *
 * Output, little-endian: one 16-byte struct group_thread per thread, then one 16-byte struct
 * group_trailer. One call must fit the iterator's seq_file buffer (8 pages: 32 KiB with 4 KiB pages,
 * more with larger ones), so at most GROUP_MAX_THREADS threads are written; a larger group says so
 * (complete = 0, walked = GROUP_MAX_THREADS) and the reader asks the per-thread program instead.
 * Keep in step with GROUP_* and parse_group in task_iter.rs.
 */
#define GROUP_MAX_THREADS 2046 /* 2046 * 16 + 16 < 32768: a full buffer counts as overflowed */
#define GROUP_MAGIC 0x54474357 /* "WCGT" */

struct group_thread {
	__u32 tid;
	__u32 state;     /* task_struct.__state | exit_state << 24 (__state uses bits 0..16) */
	__u64 switches;  /* nvcsw + nivcsw */
};

struct group_trailer {
	__u32 magic;
	__u32 tgid;
	__u32 walked;    /* threads written */
	__u32 complete;  /* 1: the walk came back to the list head; 0: cut (too many, or a fault) */
};

static __attribute__((always_inline)) long read_u64(__u64 addr, __u64 *out)
{
	return bpf_probe_read_kernel(out, sizeof(*out), (const void *)addr);
}

/* BPF_FUNC_loop (Linux >= 5.17; the walk needs >= 6.1 for its link anyway): the verifier checks the callback
 * once, not once per round as it must a bounded loop, so loading the walk costs what the per-thread program
 * does (a bounded loop of GROUP_MAX_THREADS rounds took the verifier ~150 ms at every agent start). */
static long (*bpf_loop)(__u32 nr_loops, void *callback_fn, void *callback_ctx, __u64 flags) = (void *)181;

struct walk {
	struct seq_file *seq;
	__u64 head;
	__u64 pos;
	__u32 walked;
	__u32 complete;
	__u32 failed;
};

/* One thread of the walk: 0 to go on, 1 to stop (the list's end, or a read that failed). */
static long walk_one(__u32 index, struct walk *w)
{
	struct group_thread thread = {};
	__u64 task, next = 0, nv = 0, niv = 0;
	__u32 word = 0, exit_word = 0;
	long err;

	task = w->pos - field_offset(struct task_struct, thread_node);
	err = bpf_probe_read_kernel(&thread.tid, sizeof(thread.tid),
				    (const void *)(task + field_offset(struct task_struct, pid)));
	err |= bpf_probe_read_kernel(&word, sizeof(word),
				     (const void *)(task + field_offset(struct task_struct, __state)));
	err |= bpf_probe_read_kernel(&exit_word, sizeof(exit_word),
				     (const void *)(task + field_offset(struct task_struct, exit_state)));
	err |= read_u64(task + field_offset(struct task_struct, nvcsw), &nv);
	err |= read_u64(task + field_offset(struct task_struct, nivcsw), &niv);
	err |= read_u64(task + field_offset(struct task_struct, thread_node), &next);
	if (err) {
		w->failed = 1;
		return 1;
	}
	thread.state = word | exit_word << 24;
	thread.switches = nv + niv;
	bpf_seq_write(w->seq, &thread, sizeof(thread));
	w->walked++;
	w->pos = next;
	if (next == w->head) {
		w->complete = 1;
		return 1;
	}
	return 0;
}

SEC("iter/task")
int group_states(struct bpf_iter__task *ctx)
{
	struct task_struct *leader = ctx->task;
	struct group_trailer trailer = { .magic = GROUP_MAGIC };
	struct walk w = {};
	__u64 signal = 0;

	if (!leader)
		return 0;
	trailer.tgid = leader->tgid;
	w.seq = ctx->meta->seq;
	if (read_u64((__u64)leader + field_offset(struct task_struct, signal), &signal) || !signal)
		goto out;
	w.head = signal + field_offset(struct signal_struct, thread_head);
	if (read_u64(w.head, &w.pos))
		goto out;
	if (w.pos == w.head) { /* no thread on the list: an exiting group */
		w.complete = 1;
		goto out;
	}
	bpf_loop(GROUP_MAX_THREADS, walk_one, &w, 0);
out:
	trailer.walked = w.walked;
	trailer.complete = w.complete && !w.failed;
	bpf_seq_write(ctx->meta->seq, &trailer, sizeof(trailer));
	return 0;
}

/* Task iterators read kernel memory through BTF pointers: GPL-only, as the kernel requires. */
char LICENSE[] SEC("license") = "GPL";
