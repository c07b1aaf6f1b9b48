#![warn(missing_docs)]
//! The configuration vocabulary of slaswitch: what a port, a purchase and a link policy are,
//! parsed and validated once into typed settings, and the allocation and admission maths on
//! them. No DPDK, and no I/O but reading the model file (`model_file`), so the daemon, the data plane, the fleet master and the simulator
//! share it, and the last two build without DPDK.

pub mod allocation;
pub mod bandwidth;
pub mod cli;
pub mod cpu_qos;
pub mod error;
pub mod latency_slo;
pub mod link_policy;
pub mod model_file;
pub mod names;
pub mod pmd_placement;
pub mod policing;
pub mod port;
pub mod port_plan;
pub mod port_settings;
pub mod ranges;

pub use error::ConfigError;
pub use port::{PortSpec, PortType};
