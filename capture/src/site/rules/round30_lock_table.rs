//! Round 30 (issue 38 held-out: syzbot reports on the kernel lists): lock takers of the RDMA core and
//! nfnetlink, each row read from the function's source (the lock it takes and who else holds it), so a stack
//! whose mutex slow path `/proc/<tid>/stack` leaves out still names the lock. The lookups read these rows
//! after [`super::LOCK_TAKERS`].

use super::pattern::{t, LockTaker};

/// Round 30's lock takers.
pub const ROUND30_LOCK_TAKERS: &[LockTaker] = &[
    // drivers/infiniband/core/device.c: rdma_dev_change_netns (a device moved to another namespace, and
    // rdma_dev_exit_net's move back to init_net when a namespace dies) takes mutex_lock(&device->
    // unregistration_lock); __ib_unregister_device holds the same mutex across disable_device, which waits
    // for the device's last users (wait_for_completion(&device->unreg_completion)): a netns cleanup worker
    // queues behind an unregistration stuck on a reference.
    t(
        &["rdma_dev_change_netns", "__ib_unregister_device"],
        "mutex wait",
        "the IB device's unregistration_lock (held across its unregistration and namespace moves)",
    ),
    // drivers/infiniband/core/device.c: add_one_compat_dev (a new namespace's rdma_dev_init_net, in shared
    // netns mode) and remove_one_compat_dev take mutex_lock(&device->compat_devs_mutex) around the xarray of
    // the device's per-namespace compat devices; the holder can be querying the port under rtnl_mutex
    // (rxe_query_port -> ib_get_eth_speed).
    t(
        &["add_one_compat_dev", "remove_one_compat_dev"],
        "mutex wait",
        "the IB device's compat_devs_mutex (its per-namespace compat devices)",
    ),
    // net/netfilter/nfnetlink.c: nfnl_lock(subsys_id) is mutex_lock(&table[subsys_id].mutex), the one
    // mutex per nfnetlink subsystem (ipset, ctnetlink, nf_tables…); nfnetlink_rcv_msg takes it around a
    // NFNL_CB_MUTEX callback and nfnetlink_rcv_batch around a whole batch (nf_tables' transactions), so
    // every sender to that subsystem queues on a holder stuck in its callback.
    t(
        &["nfnl_lock", "nfnetlink_rcv_msg", "nfnetlink_rcv_batch"],
        "mutex wait",
        "the nfnetlink subsystem's mutex (nfnl_lock: table[subsys_id].mutex)",
    ),
    // net/8021q/vlan.c: vlan_ioctl_handler (SIOCSIFVLAN/SIOCGIFVLAN, called by sock_ioctl under
    // vlan_ioctl_mutex) copies the request in and calls rtnl_lock() before it looks the device up: every
    // VLAN ioctl queues on whoever holds RTNL (netns cleanup, linkwatch, a tun close).
    t(&["vlan_ioctl_handler"], "mutex wait", "rtnl_mutex (RTNL)"),
    // block/fops.c: blkdev_read_iter takes inode_lock_shared(bd_inode) (inlined) since 6.15's fix for the
    // race with set_blocksize, which takes the block device inode's i_rwsem exclusively (inode_lock) with
    // the mapping's invalidate lock while it changes the block size: a read of the device waits for it.
    t(
        &["blkdev_read_iter"],
        "rwsem wait (read)",
        "the inode lock (i_rwsem; i_mutex before 4.7)",
    ),
];
