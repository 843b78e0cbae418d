// SPDX-License-Identifier: GPL-2.0
/*
 * wedge-capture's blocker records (capture/src/blockers.rs): a BPF task iterator that writes one 96-byte
 * record per task it visits, read once per capture (never by the watch loop's scan). Each record says what
 * the task is blocked on as the kernel itself recorded it for the hung-task detector
 * (`task_struct::blocker`, CONFIG_DETECT_HUNG_TASK_BLOCKER, Linux >= 6.16: the lock's address with its
 * type in the two low bits, include/linux/hung_task.h), the lock's owner word as kernel/hung_task.c's
 * debug_show_blocker reads it (mutex owner, rwsem owner, semaphore last holder), and the address of the
 * task's own mm->mmap_lock (and that lock's owner and count words: the kernel records no blocker for a
 * killable wait, which is how mmap and page faults wait for it) and task_struct, so that user space can name
 * the lock (the mmap_lock of which process) and the owner (which task).
 *
 * Nothing is dereferenced that the verifier cannot prove: the iterator's task is a trusted BTF pointer
 * (direct CO-RE loads); the lock, its owner word and the inode the lock may sit in are plain addresses,
 * read only through bpf_probe_read_kernel (a fault reads as an error, never a crash).
 *
 * CO-RE: a kernel without `task_struct::blocker` (before 6.16, or built without the option) loads this
 * program too: bpf_core_field_exists() is false there, the read is never reached (the loader poisons it and
 * the verifier prunes it), and every record says NO_BLOCKER_FIELD. The `.rodata` variable
 * `wedge_refuse_blocker_field`, set by the loader only for tests (WEDGE_CAPTURE_TEST_REFUSE_BLOCKER_FIELD),
 * takes that branch on a kernel that has the field, and reads no lock word at all (not even the
 * mmap_lock's): the records then name no holder, and the sampled fallback alone must.
 *
 * Self-contained (no vmlinux.h, no libbpf headers), like task_states.bpf.c: the structs below carry only the
 * fields read, marked preserve_access_index. Built by gen_task_states.sh into task_blockers.bpf.o (checked
 * in). Keep `struct blocker_record` in step with RECORD_LEN and parse_records in blockers.rs.
 */
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef unsigned short umode_t;
typedef unsigned int dev_t;

#define SEC(name) __attribute__((section(name), used))
#define CORE_RELOCATED __attribute__((preserve_access_index))
/* enum bpf_field_info_kind (libbpf's bpf_core_read.h) */
#define FIELD_BYTE_OFFSET 0
#define FIELD_EXISTS 2
#define field_exists(expr) __builtin_preserve_field_info(expr, FIELD_EXISTS)
#define field_offset(type, field) \
	((__u64)__builtin_preserve_field_info(((type *)0)->field, FIELD_BYTE_OFFSET))

struct seq_file;

typedef struct {
	long counter;
} atomic_long_t;

struct rw_semaphore {
	atomic_long_t count;
	atomic_long_t owner;
} CORE_RELOCATED;

struct mutex {
	atomic_long_t owner;
} CORE_RELOCATED;

struct semaphore {
	unsigned int count;
	unsigned long last_holder;
} CORE_RELOCATED;

struct mm_struct {
	struct rw_semaphore mmap_lock;
} CORE_RELOCATED;

struct dentry;
struct super_block {
	dev_t s_dev;
	struct rw_semaphore s_umount;
	struct dentry *s_root;
} CORE_RELOCATED;

struct dentry {
	struct super_block *d_sb;
} CORE_RELOCATED;

struct inode;
struct address_space {
	struct inode *host;
	struct rw_semaphore invalidate_lock;
} CORE_RELOCATED;

struct inode {
	umode_t i_mode;
	struct super_block *i_sb;
	unsigned long i_ino;
	struct rw_semaphore i_rwsem;
	struct address_space i_data;
} CORE_RELOCATED;

struct file {
	struct address_space *f_mapping;
	struct inode *f_inode;
	struct mutex f_pos_lock;
} CORE_RELOCATED;

struct task_struct {
	int pid;
	int tgid;
	unsigned int __state;
	int exit_state;
	struct mm_struct *mm;
	unsigned long blocker;
} CORE_RELOCATED;

struct bpf_iter_meta {
	struct seq_file *seq;
} CORE_RELOCATED;

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
} CORE_RELOCATED;

/* include/linux/hung_task.h */
#define BLOCKER_TYPE_MASK 0x03UL
#define BLOCKER_TYPE_MUTEX 0x00UL
#define BLOCKER_TYPE_SEM 0x01UL

/* record.flags */
#define NO_BLOCKER_FIELD 0x1   /* no task_struct::blocker (or refused for a test) */
#define LOCK_UNREADABLE 0x2    /* the lock's words could not be read */
#define NO_SEM_HOLDER_FIELD 0x4 /* struct semaphore has no last_holder */

/* record.lock_home: the structure the lock is a member of, proven by a back pointer */
#define HOME_UNKNOWN 0
#define HOME_INODE_RWSEM 1      /* inode->i_rwsem (inode->i_data.host == inode) */
#define HOME_INODE_INVALIDATE 2 /* inode->i_data.invalidate_lock */
#define HOME_SB_UMOUNT 3        /* super_block->s_umount (sb->s_root->d_sb == sb) */
#define HOME_FILE_POS 4         /* file->f_pos_lock (file->f_mapping == &file->f_inode->i_data) */

/* Little-endian on both target arches (x86_64, aarch64); 96 bytes, no padding. */
struct blocker_record {
	__u32 tid;
	__u32 tgid;
	__u32 state;      /* task_struct.__state, raw bits */
	__u32 flags;
	__u64 task;       /* this task_struct's address: what an owner word points at */
	__u64 mmap_lock;  /* &task->mm->mmap_lock; 0 for a task without mm (kernel thread, exiting) */
	__u64 blocker;    /* task_struct.blocker: lock address | BLOCKER_TYPE_*; 0 when not blocked */
	__u64 owner;      /* mutex.owner / rw_semaphore.owner / semaphore.last_holder, raw (flag bits kept) */
	__u64 count;      /* rw_semaphore.count / semaphore.count, raw */
	__u64 ino;        /* inode number when lock_home is an inode */
	__u32 dev;        /* the inode's or superblock's s_dev (kernel encoding: major << 20 | minor) */
	__u32 lock_home;  /* HOME_* */
	__u32 i_mode;     /* the inode's mode (file type) */
	__u32 exit_state; /* EXIT_ZOMBIE / EXIT_DEAD bits */
	__u64 mm_owner;   /* task->mm->mmap_lock.owner, raw: its writer, or its last reader */
	__u64 mm_count;   /* task->mm->mmap_lock.count, raw: writer bit, waiters, readers from bit 8 */
};

/* Set by the loader for tests only: behave as on a kernel without task_struct::blocker. */
const volatile __u32 wedge_refuse_blocker_field = 0;

/* enum bpf_func_id in include/uapi/linux/bpf.h (stable UAPI numbers). */
static long (*bpf_seq_write)(struct seq_file *m, const void *data, __u32 len) = (void *)127;
static long (*bpf_probe_read_kernel)(void *dst, __u32 size, const void *unsafe_ptr) = (void *)113;

static __u64 read_word(__u64 addr, int *failed)
{
	__u64 value = 0;

	if (bpf_probe_read_kernel(&value, sizeof(value), (const void *)addr) != 0)
		*failed = 1;
	return value;
}

/* The inode's number, mode and device, once `inode` is proven to be one. */
static void inode_identity(struct blocker_record *r, __u64 inode)
{
	umode_t mode = 0;
	dev_t dev = 0;
	__u64 sb;
	int failed = 0;

	r->ino = read_word(inode + field_offset(struct inode, i_ino), &failed);
	bpf_probe_read_kernel(&mode, sizeof(mode), (const void *)(inode + field_offset(struct inode, i_mode)));
	r->i_mode = mode;
	sb = read_word(inode + field_offset(struct inode, i_sb), &failed);
	if (!failed && bpf_probe_read_kernel(&dev, sizeof(dev), (const void *)(sb + field_offset(struct super_block, s_dev))) == 0)
		r->dev = dev;
}

/* Whether `inode` is an inode: its own i_data.host points back at it. */
static int is_inode(__u64 inode)
{
	int failed = 0;
	__u64 back = read_word(inode + field_offset(struct inode, i_data) + field_offset(struct address_space, host),
			       &failed);

	return !failed && inode && back == inode;
}

/* A mutex that is an open file's f_pos_lock: the file's f_mapping is its inode's own i_data (regular files
 * and directories), and that inode is one. */
static void mutex_home(struct blocker_record *r, __u64 lock)
{
	__u64 file = lock - field_offset(struct file, f_pos_lock);
	__u64 inode, mapping;
	int failed = 0;

	inode = read_word(file + field_offset(struct file, f_inode), &failed);
	mapping = read_word(file + field_offset(struct file, f_mapping), &failed);
	if (failed || !inode || mapping != inode + field_offset(struct inode, i_data) || !is_inode(inode))
		return;
	r->lock_home = HOME_FILE_POS;
	inode_identity(r, inode);
}

/* The structure an rwsem is a member of, when a back pointer proves it: an inode's i_rwsem or its
 * mapping's invalidate_lock (inode->i_data.host points back at the inode), or a superblock's s_umount
 * (sb->s_root->d_sb points back at the superblock). Anything else stays HOME_UNKNOWN. */
static void rwsem_home(struct blocker_record *r, __u64 lock)
{
	__u64 inode, sb, root, back;
	int failed = 0;

	inode = lock - field_offset(struct inode, i_rwsem);
	if (is_inode(inode)) {
		r->lock_home = HOME_INODE_RWSEM;
		inode_identity(r, inode);
		return;
	}
	inode = lock - field_offset(struct address_space, invalidate_lock) - field_offset(struct inode, i_data);
	if (is_inode(inode)) {
		r->lock_home = HOME_INODE_INVALIDATE;
		inode_identity(r, inode);
		return;
	}
	sb = lock - field_offset(struct super_block, s_umount);
	root = read_word(sb + field_offset(struct super_block, s_root), &failed);
	if (failed || !root)
		return;
	back = read_word(root + field_offset(struct dentry, d_sb), &failed);
	if (!failed && back == sb) {
		dev_t dev = 0;

		r->lock_home = HOME_SB_UMOUNT;
		if (bpf_probe_read_kernel(&dev, sizeof(dev), (const void *)(sb + field_offset(struct super_block, s_dev))) == 0)
			r->dev = dev;
	}
}

SEC("iter/task")
int task_blockers(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct blocker_record r = {};
	struct mm_struct *mm;
	__u64 lock, type;
	int failed = 0;

	if (!task)
		return 0;
	r.tid = task->pid;
	r.tgid = task->tgid;
	r.state = task->__state;
	r.exit_state = task->exit_state;
	r.task = (__u64)task;
	mm = task->mm;
	if (mm)
		r.mmap_lock = (__u64)&mm->mmap_lock;
	if (wedge_refuse_blocker_field) {
		/* The test hook: no lock word read at all, the fallback alone names holders. */
		r.flags |= NO_BLOCKER_FIELD;
		goto out;
	}
	if (mm) {
		/* The kernel records a blocker only for TASK_UNINTERRUPTIBLE sleeps: a killable mmap_lock wait
		 * (mmap, munmap, a page fault) has none, so the lock's own words are read here for every mm. */
		r.mm_owner = read_word(r.mmap_lock + field_offset(struct rw_semaphore, owner), &failed);
		r.mm_count = read_word(r.mmap_lock + field_offset(struct rw_semaphore, count), &failed);
		failed = 0;
	}
	if (!field_exists(task->blocker)) {
		r.flags |= NO_BLOCKER_FIELD;
		goto out;
	}
	r.blocker = task->blocker;
	if (!r.blocker)
		goto out;
	lock = r.blocker & ~BLOCKER_TYPE_MASK;
	type = r.blocker & BLOCKER_TYPE_MASK;
	if (type == BLOCKER_TYPE_MUTEX) {
		r.owner = read_word(lock + field_offset(struct mutex, owner), &failed);
		mutex_home(&r, lock);
	} else if (type == BLOCKER_TYPE_SEM) {
		unsigned int count = 0;

		if (field_exists(((struct semaphore *)0)->last_holder))
			r.owner = read_word(lock + field_offset(struct semaphore, last_holder), &failed);
		else
			r.flags |= NO_SEM_HOLDER_FIELD;
		if (bpf_probe_read_kernel(&count, sizeof(count),
					  (const void *)(lock + field_offset(struct semaphore, count))) != 0)
			failed = 1;
		r.count = count;
	} else {
		r.owner = read_word(lock + field_offset(struct rw_semaphore, owner), &failed);
		r.count = read_word(lock + field_offset(struct rw_semaphore, count), &failed);
		rwsem_home(&r, lock);
	}
	if (failed)
		r.flags |= LOCK_UNREADABLE;
out:
	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}

/* Task iterators read kernel memory through BTF pointers: GPL-only, as the kernel requires. */
char LICENSE[] SEC("license") = "GPL";
