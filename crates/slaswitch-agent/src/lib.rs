#![warn(missing_docs)]
//! slaswitch-agent: what a switch needs to take part in SoftBW's fleet (seed 003 Sec. 4, Fig. 4),
//! and nothing of the master's billing store, so `slaswitchd` links no SQLite or PostgreSQL.
//!
//! * [`purchase`]: what a tenant buys for a VM and what its host is told to enforce;
//! * [`usage`]: what a host reports each billing cycle;
//! * [`keys`]: where each of them lives in etcd; [`etcd`]: connecting to it;
//! * [`agent`]: the agent in every `slaswitchd` (`--etcd URL --host-id NAME`).
//!
//! The master, billing and the store are in `slaswitch-cluster`.

pub mod agent;
pub mod error;
pub mod etcd;
pub mod keys;
pub mod purchase;
pub mod usage;

pub use error::FleetError;
