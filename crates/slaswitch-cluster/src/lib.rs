#![warn(missing_docs)]
//! slaswitch-cluster: SoftBW's system across hosts (seed 003 Sec. 4, Fig. 4).
//!
//! * [`purchase`], [`usage`], [`keys`] and [`agent`] (the agent in every `slaswitchd`): from
//!   `slaswitch-agent`, which the switch links without the billing store;
//! * [`master`]: `slaswitch-master`, which places purchases on the hosts whose ports announce
//!   them, bills every cycle and keeps dynamic guarantees up to date;
//! * [`billing`] and [`store`]: usage-based charging (seed 003 Sec. 3.3, the price functions in
//!   `slaswitch_qos::pricing`) into SQLite or PostgreSQL, one record per VM per cycle;
//! * [`bill`]: a tenant's bill as a table, CSV, JSON and a plot.
//!
//! Cluster state lives in etcd ([`keys`]); nothing here speaks a protocol of its own. One host
//! without etcd needs none of this.

pub mod admin;
pub mod admission;
pub mod bill;
pub mod billing;
pub mod error;
pub mod etcd_server;
pub mod master;
pub mod scale;
pub mod store;
pub mod utilization;

pub use slaswitch_agent::{agent, etcd, keys, purchase, usage};

pub use error::ClusterError;
