//! What every capture stage and the episode lifecycle append to an incident, as its own methods: a timeline
//! event (stamped now) and an entry of what was not captured, with why.

use crate::model::{Incident, NotCaptured, TimelineEvent, Timestamp};

impl Incident {
    /// Append `event` to the timeline, stamped now.
    pub fn push_timeline(&mut self, event: impl Into<String>) {
        self.timeline.push(TimelineEvent {
            at: Timestamp::now(),
            event: event.into(),
        });
    }

    /// Record that `what` was not captured, and `why`.
    pub fn push_not_captured(&mut self, what: impl Into<String>, why: impl Into<String>) {
        self.not_captured.push(NotCaptured {
            what: what.into(),
            why: why.into(),
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::model::Incident;

    #[test]
    fn events_and_gaps_are_appended_in_order() {
        let mut incident = Incident::new(7);
        let before = incident.timeline.len();
        incident.push_timeline("first");
        incident.push_timeline(String::from("second"));
        let added: Vec<&str> = incident.timeline[before..]
            .iter()
            .map(|e| e.event.as_str())
            .collect();
        assert_eq!(added, ["first", "second"]);
        assert!(incident.timeline[before].at.wall.is_some());
        incident.push_not_captured("maps", "timed out");
        let gap = incident.not_captured.last().unwrap();
        assert_eq!((gap.what.as_str(), gap.why.as_str()), ("maps", "timed out"));
    }
}
