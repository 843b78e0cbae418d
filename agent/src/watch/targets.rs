//! Which processes to watch. The watch loop asks its [`TargetSource`] once per scan; `run` uses
//! [`ChildTree`] (every descendant of ours), the host daemon adds sources that match by comm, cgroup,
//! open GPU fds or ring files.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use capture::ProcRoot;

/// A process to watch and why it is watched (shown in the incident's timeline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub pid: i32,
    /// The parent it was found under (0 when unknown).
    pub parent: i32,
    pub why: String,
}

/// Finds the processes to watch. Called once per scan; must be cheap and must not block on a target
/// (read only files that cannot hang: stat, status, task/*/children, fd links, cgroup).
pub trait TargetSource {
    /// The processes to watch now.
    fn targets(&mut self, proc_root: &ProcRoot) -> Vec<Target>;

    /// Pids that must never be watched even if the source finds them (our probe children).
    fn exclude(&mut self, pids: &HashSet<i32>) {
        let _ = pids;
    }
}

/// Every descendant of `root` (for `run`: our own pid — we are the subreaper, so orphans come back to us).
///
/// Children are found through `task/<tid>/children` (CONFIG_PROC_CHILDREN); a child can be forked from any
/// thread. Processes with few threads are read whole at every scan; for a process with thousands of threads,
/// the main thread is read at every scan and every thread at every 10th scan (a child forked by a side thread
/// is found within 10 intervals, well inside the default 30 s threshold), which bounds the cost.
#[derive(Debug)]
pub struct ChildTree {
    root: i32,
    excluded: HashSet<i32>,
    scan: u64,
    full_every: u64,
    /// pid → children found at the last full read of all its threads.
    known: BTreeMap<i32, BTreeSet<i32>>,
    /// Processes with more than [`SMALL_PROCESS_THREADS`] threads at their last listing.
    big: HashSet<i32>,
}

impl ChildTree {
    pub fn new(root: i32) -> ChildTree {
        ChildTree {
            root,
            excluded: HashSet::new(),
            scan: 0,
            full_every: 10,
            known: BTreeMap::new(),
            big: HashSet::new(),
        }
    }

    fn children_of(&mut self, proc_root: &ProcRoot, pid: i32, all_threads: bool) -> BTreeSet<i32> {
        // Small processes are read whole at every scan; big ones (as of their last full read) only every
        // `full_every`-th scan, without even listing their threads in between.
        let tids = if all_threads || !self.big.contains(&pid) {
            let tids = proc_root.tasks(pid).unwrap_or_default();
            if tids.len() > SMALL_PROCESS_THREADS {
                self.big.insert(pid);
                if !all_threads {
                    vec![pid]
                } else {
                    tids
                }
            } else {
                self.big.remove(&pid);
                tids
            }
        } else {
            vec![pid]
        };
        let mut out = BTreeSet::new();
        for tid in tids {
            out.extend(proc_root.children(pid, tid).unwrap_or_default());
        }
        out
    }
}

/// Processes with at most this many threads have every thread's children read at every scan.
const SMALL_PROCESS_THREADS: usize = 64;

impl TargetSource for ChildTree {
    fn targets(&mut self, proc_root: &ProcRoot) -> Vec<Target> {
        self.scan += 1;
        let full = self.scan % self.full_every == 1 || self.full_every <= 1;
        let mut seen = BTreeSet::new();
        let mut frontier = vec![self.root];
        let mut out = Vec::new();
        while let Some(pid) = frontier.pop() {
            if !seen.insert(pid) || seen.len() > 100_000 {
                continue;
            }
            let mut children = self.children_of(proc_root, pid, full || pid == self.root);
            if full {
                self.known.insert(pid, children.clone());
            } else if let Some(known) = self.known.get(&pid) {
                // Between full reads, children forked by other threads are remembered while they live.
                children.extend(known.iter().copied().filter(|&c| proc_root.exists(c)));
            }
            for child in children {
                if self.excluded.contains(&child) {
                    continue;
                }
                out.push(Target {
                    pid: child,
                    parent: pid,
                    why: if pid == self.root {
                        "child of wedge-capture run".to_string()
                    } else {
                        format!("descendant (parent {pid})")
                    },
                });
                frontier.push(child);
            }
        }
        self.known.retain(|pid, _| seen.contains(pid));
        self.big.retain(|pid| seen.contains(pid));
        out.sort_by_key(|t| t.pid);
        out.dedup_by_key(|t| t.pid);
        out
    }

    fn exclude(&mut self, pids: &HashSet<i32>) {
        self.excluded.clone_from(pids);
    }
}

/// A fixed list of pids (tests, `capture`-like one-shot watches).
#[derive(Debug, Clone)]
pub struct FixedPids(pub Vec<i32>);

impl TargetSource for FixedPids {
    fn targets(&mut self, proc_root: &ProcRoot) -> Vec<Target> {
        self.0
            .iter()
            .filter(|&&pid| proc_root.exists(pid))
            .map(|&pid| Target {
                pid,
                parent: 0,
                why: "named on the command line".to_string(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_grandchildren() {
        // sh → sleep (grandchild of this test process).
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & wait"])
            .spawn()
            .unwrap();
        let me = std::process::id() as i32;
        let proc_root = ProcRoot::default();
        let mut tree = ChildTree::new(me);
        let mut found = Vec::new();
        for _ in 0..100 {
            found = tree.targets(&proc_root);
            // Other tests of this binary fork children too: wait for these very ones.
            if found.iter().any(|t| t.pid == child.id() as i32)
                && found.iter().any(|t| t.why.starts_with("descendant"))
            {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        let pids: Vec<i32> = found.iter().map(|t| t.pid).collect();
        assert!(pids.contains(&(child.id() as i32)), "{found:?}");
        assert!(
            found.iter().any(|t| t.why.starts_with("descendant")),
            "{found:?}"
        );
    }
}
