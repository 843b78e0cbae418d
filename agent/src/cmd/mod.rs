//! One module per subcommand.

pub mod agent;
pub mod capture;
pub mod decode_ioctl;
pub mod doctor;
pub mod explain;
pub mod npd_check;
pub mod report;
pub mod ring;
pub mod run;
pub mod selftest;
pub mod upload;
