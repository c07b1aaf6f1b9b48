#![warn(missing_docs)]
//! The test bed: every claim the project makes is an experiment anyone reruns with one command.
//! A scenario file describes the VMs, the uplink, QoS settings and phases; the runner stands the
//! same scenario up on each switch (slaswitch, OVS-DPDK, a Linux bridge with tc, VDE2), samples
//! every second, and writes raw samples, plots and a Markdown report.
//!
//! Errors: what an experimenter writes is checked into typed errors that name the field
//! ([`scenario::ScenarioError`], [`capacity::BudgetError`]); running one (processes, switches,
//! files) reports `anyhow` chains, since the experiment program and the tests are the only
//! callers and none of them recovers from a failed run other than by reporting it.

pub mod capacity;
pub mod cleanup;
pub mod core_latency;
pub mod core_shield;
pub mod driver;
pub mod fleet;
pub mod guest;
pub mod host_noise;
pub mod host_steal;
pub mod namespaces;
pub mod plan;
pub mod preflight;
pub mod provenance;
pub mod report;
pub mod report_bill;
pub mod runner;
pub mod samples;
pub mod scenario;
pub mod switch_linux_tc;
pub mod switch_ovs;
pub mod switch_slaswitch;
pub mod switch_vde2;
pub mod switches;
