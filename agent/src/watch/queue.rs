//! The queue between detection and capture: fair per tenant.
//!
//! Every watched process belongs to a *tenant* ([`tenant_of`]: its pod or container, else its uid): the unit
//! of trust on a shared host. A tenant chooses when its threads sit in D (vfork + a FIFO needs no privilege),
//! so it chooses when captures run; the queue makes sure that costs only that tenant:
//! - one queue per tenant, served round robin ([`FairQueue::pop`]): the next capture comes from the next tenant
//!   that has one waiting, never from the tenant with the longest queue;
//! - at most one capture per tenant in flight (the caller says which tenants are busy), so ten hostile wedges
//!   of one tenant hold at most one capture worker;
//! - at most `max_per_tenant` captures waiting per tenant: beyond it the new one is refused and
//!   the caller records the capture as not run (its minimal incident is durable already).
//!
//! Pure: no clock, no I/O; the capture workers ([`super::workers`]) and the episode lifecycle
//! ([`super::incident`]) use it.

use std::collections::VecDeque;

use reports::model::Incident;

/// Who a process belongs to, for the fairness of captures: its pod (`pod:<uid>`), else its container
/// (`container:<runtime>:<id>`), else its effective uid (`uid:<n>`), else `unknown` (its status could not
/// be read: such processes share one queue).
pub fn tenant_of(incident: &Incident, effective_uid: Option<u32>) -> String {
    if let Some(container) = &incident.process.container {
        if let Some(pod) = container.pod_uid.as_deref().filter(|p| !p.is_empty()) {
            return format!("pod:{pod}");
        }
        if !container.id.is_empty() {
            return format!("container:{}:{}", container.runtime, container.id);
        }
    }
    match effective_uid {
        Some(uid) => format!("uid:{uid}"),
        None => "unknown".to_string(),
    }
}

/// Per-tenant FIFO queues served round robin.
#[derive(Debug)]
pub struct FairQueue<T> {
    /// The rotation: the tenant at the front is asked first.
    tenants: VecDeque<(String, VecDeque<T>)>,
    max_per_tenant: usize,
}

impl<T> FairQueue<T> {
    pub fn new(max_per_tenant: usize) -> FairQueue<T> {
        FairQueue {
            tenants: VecDeque::new(),
            max_per_tenant: max_per_tenant.max(1),
        }
    }

    /// Queue `item` for `tenant`; gives it back when that tenant already has `max_per_tenant` waiting.
    pub fn push(&mut self, tenant: &str, item: T) -> Result<(), T> {
        match self.tenants.iter_mut().find(|(t, _)| t == tenant) {
            Some((_, items)) if items.len() >= self.max_per_tenant => Err(item),
            Some((_, items)) => {
                items.push_back(item);
                Ok(())
            }
            None => {
                self.tenants
                    .push_back((tenant.to_string(), VecDeque::from([item])));
                Ok(())
            }
        }
    }

    /// The next item of the first tenant in the rotation that is not `busy`; that tenant goes to the back
    /// of the rotation.
    pub fn pop(&mut self, busy: impl Fn(&str) -> bool) -> Option<(String, T)> {
        let at = self.tenants.iter().position(|(t, _)| !busy(t))?;
        let (tenant, mut items) = self.tenants.remove(at)?;
        let item = items.pop_front()?;
        if !items.is_empty() {
            self.tenants.push_back((tenant.clone(), items));
        }
        Some((tenant, item))
    }

    /// Items waiting, all tenants.
    pub fn len(&self) -> usize {
        self.tenants.iter().map(|(_, items)| items.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.tenants.is_empty()
    }

    /// Take out every waiting item (shutdown).
    pub fn drain(&mut self) -> Vec<(String, T)> {
        let mut out = Vec::new();
        for (tenant, items) in self.tenants.drain(..) {
            out.extend(items.into_iter().map(|item| (tenant.clone(), item)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reports::model::ContainerInfo;

    #[test]
    fn tenants_are_served_round_robin_whatever_their_queue_length() {
        let mut queue = FairQueue::new(100);
        for n in 0..10 {
            queue.push("hostile", format!("h{n}")).unwrap();
        }
        queue.push("victim", "v0".to_string()).unwrap();
        queue.push("other", "o0".to_string()).unwrap();
        let order: Vec<String> = std::iter::from_fn(|| queue.pop(|_| false).map(|(_, i)| i))
            .take(5)
            .collect();
        // The victim's capture is second, not eleventh.
        assert_eq!(order, ["h0", "v0", "o0", "h1", "h2"]);
        assert_eq!(queue.len(), 7);
    }

    #[test]
    fn a_busy_tenant_waits_and_others_pass_it() {
        let mut queue = FairQueue::new(100);
        queue.push("a", 1).unwrap();
        queue.push("a", 2).unwrap();
        queue.push("b", 3).unwrap();
        assert_eq!(queue.pop(|t| t == "a"), Some(("b".to_string(), 3)));
        assert_eq!(queue.pop(|t| t == "a"), None);
        assert_eq!(queue.pop(|_| false), Some(("a".to_string(), 1)));
        assert_eq!(queue.pop(|_| false), Some(("a".to_string(), 2)));
        assert!(queue.is_empty());
        assert_eq!(queue.pop(|_| false), None);
    }

    #[test]
    fn a_tenant_cannot_queue_more_than_its_bound() {
        let mut queue = FairQueue::new(2);
        assert!(queue.push("a", 1).is_ok());
        assert!(queue.push("a", 2).is_ok());
        assert_eq!(queue.push("a", 3), Err(3));
        assert!(queue.push("b", 4).is_ok());
        let drained = queue.drain();
        assert_eq!(drained.len(), 3);
        assert!(queue.is_empty());
    }

    #[test]
    fn the_tenant_is_the_pod_then_the_container_then_the_uid() {
        let mut incident = Incident::new(1);
        assert_eq!(tenant_of(&incident, Some(1000)), "uid:1000");
        assert_eq!(tenant_of(&incident, None), "unknown");
        incident.process.container = Some(ContainerInfo {
            runtime: "containerd".into(),
            id: "abc".into(),
            ..ContainerInfo::default()
        });
        assert_eq!(tenant_of(&incident, Some(0)), "container:containerd:abc");
        incident.process.container.as_mut().unwrap().pod_uid = Some("u-1".into());
        assert_eq!(tenant_of(&incident, Some(0)), "pod:u-1");
    }
}
