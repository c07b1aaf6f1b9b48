#![warn(missing_docs)]
//! The traffic of emulated VMs, shared by the tenant (which sends and receives it) and the test
//! bed (which checks scenario files and knows each VM's addresses).

pub mod frames;
pub mod meter;
pub mod phase;
pub mod short_flows;
