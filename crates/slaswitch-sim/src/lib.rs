#![warn(missing_docs)]
//! slaswitch-sim: studies a provider runs before it sells, on the switch's own QoS code.
//!
//! [`overcommit`]: how far bandwidth guarantees can be over-committed for a failure rate
//! (SoftBW, seed 003 Sec. 2.2): Eq. 2 from `slaswitch-qos`, checked by [`monte_carlo`].
//!
//! [`datacenter`]: seed 003's datacenter (Sec. 6.4) with SoftBW's fluid allocation from
//! `slaswitch-qos`, its outputs in [`datacenter_report`], its fluid step checked against the
//! packet scheduler by [`validate`]; [`datacenter_cpu`] puts each server's switch core in front
//! of its link, shared by C2TB in fluid form; [`short_flows`] replays its most contended links
//! frame by frame with one VM's short flows (seed 003 Fig. 7 at its scale).

pub mod datacenter;
pub mod datacenter_cpu;
pub mod datacenter_report;
pub mod error;
pub mod monte_carlo;
pub mod overcommit;
pub mod placement_study;
pub mod pmd_study;
pub mod short_flows;
pub mod short_flows_report;
pub mod validate;
pub mod validate_cpu;

pub use error::SimError;
