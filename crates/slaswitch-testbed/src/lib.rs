#![warn(missing_docs)]
//! The test bed: every claim the project makes is an experiment anyone reruns with one command.
//! A scenario file describes the VMs, the uplink, QoS settings and phases; the runner stands the
//! same scenario up on each switch (slaswitch, OVS-DPDK, a Linux bridge with tc, VDE2), samples
//! every second, and writes raw samples, plots and a Markdown report.

pub mod capacity;
pub mod cleanup;
pub mod driver;
pub mod host_steal;
pub mod namespaces;
pub mod plan;
pub mod preflight;
pub mod provenance;
pub mod report;
pub mod runner;
pub mod samples;
pub mod scenario;
pub mod switch_linux_tc;
pub mod switch_ovs;
pub mod switch_slaswitch;
pub mod switch_vde2;
pub mod switches;
