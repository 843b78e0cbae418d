//! The agent's view of its settings ([`crate::settings::Settings`], defined, merged and resolved in the
//! settings layer): the target selection and source bounds the host sources take.

use regex::Regex;

use crate::daemon::sources::{Selection, SourceSettings};
use crate::settings::{AgentSettings, Settings};

impl Settings {
    /// The target selection (regexes compiled; validated before, so this cannot fail).
    pub fn selection(&self) -> Selection {
        Selection {
            comm: self
                .agent
                .match_comm
                .iter()
                .filter_map(|p| Regex::new(p).ok())
                .collect(),
            cgroup: self.agent.match_cgroup.clone(),
            gpu: self.agent.gpu,
            ring_dirs: self.agent.ring_dir.clone(),
        }
    }

    pub fn source_settings(&self) -> SourceSettings {
        SourceSettings::from(&self.agent)
    }
}

impl From<&AgentSettings> for SourceSettings {
    fn from(agent: &AgentSettings) -> Self {
        SourceSettings {
            gpu_rescan: agent.gpu_rescan,
            max_targets: agent.max_targets,
            proc_events: agent.proc_events,
        }
    }
}
