//! The slaswitch data plane: DPDK ports polled by pinned PMD threads through ingress,
//! classification and egress, with TSC cycles charged per port per stage.

pub mod allocation;
pub mod bandwidth;
pub mod compare;
pub mod counters;
pub mod cpu_qos;
pub mod datapath;
pub mod paced_tx;
pub mod pmd;
mod pmd_qos;
pub mod policing;
pub mod port;

pub use datapath::{Datapath, DatapathSettings, FlowStats, PmdStats, PortStats};
pub use port::{PortSpec, PortType};
