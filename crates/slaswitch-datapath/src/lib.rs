#![warn(missing_docs)]
//! The slaswitch data plane: DPDK ports polled by pinned PMD threads through ingress,
//! classification and egress, with TSC cycles charged per port per stage.

pub mod counters;
pub mod datapath;
mod drift;
pub mod error;
mod flow_caches;
pub mod histogram;
pub mod host_time;
pub mod idle_polling;
pub mod kernel_tx;
pub mod paced_tx;
pub mod pmd;
pub mod pmd_config;
pub mod pmd_sleep;
mod poll_order;
pub mod probe;
mod residence;
mod spin;
mod stages;

pub use datapath::{CpuMode, Datapath, DatapathSettings, FlowStats, PmdStats, PortStats};
pub use error::DatapathError;
