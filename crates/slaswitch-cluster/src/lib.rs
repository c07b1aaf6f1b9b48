#![warn(missing_docs)]
//! slaswitch-cluster: SoftBW's system across hosts (seed 003 Sec. 4, Fig. 4).
//!
//! * [`purchase`]: what a tenant buys for a VM and what its host is told to enforce;
//! * [`agent`]: the agent in every `slaswitchd` (`--etcd URL --host-id NAME`);
//! * [`master`]: `slaswitch-master`, which places purchases on the hosts whose ports announce
//!   them, bills every cycle and keeps dynamic guarantees up to date;
//! * [`billing`] and [`store`]: usage-based charging (seed 003 Sec. 3.3, the price functions in
//!   `slaswitch_qos::pricing`) into SQLite or PostgreSQL, one record per VM per cycle;
//! * [`bill`]: a tenant's bill as a table, CSV, JSON and a plot.
//!
//! Cluster state lives in etcd ([`keys`]); nothing here speaks a protocol of its own. One host
//! without etcd needs none of this.

pub mod admin;
pub mod agent;
pub mod bill;
pub mod billing;
pub mod error;
pub mod etcd;
pub mod etcd_server;
pub mod keys;
pub mod master;
pub mod purchase;
pub mod scale;
pub mod store;
pub mod usage;

pub use error::ClusterError;
