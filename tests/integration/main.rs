//! The one integration test binary (ripgrep style): each module tests one area through the built
//! `wedge-capture` binary (`env!("CARGO_BIN_EXE_wedge-capture")`).

mod agent;
mod capture;
mod episode;
mod fleet;
mod harness;
mod hostile_capture;
mod hostile_daemon;
mod hostile_rings;
mod hostile_store;
mod inject;
mod nvidia_decode;
mod python_frames;
mod quiet_scan;
mod redaction;
mod report;
mod ring;
mod run;
mod settings;
mod upload;
mod util;
