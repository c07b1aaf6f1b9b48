//! slaswitch-tenant: an emulated VM (or many) attached over vhost-user the way a VM's virtio-net
//! is: a DPDK virtio-user device per VM. It stands in for the seeds' VMs and pkt-gen.

pub mod generator;
pub mod sink;

pub use slaswitch_traffic::{frames, phase};
