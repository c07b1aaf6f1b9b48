//! What the planner takes (a port's configuration and settings, and its PMD) and what it gives
//! (what the port is to get); shared by the admission rules in [`crate::allocation`] and
//! [`crate::latency_slo`].

use slaswitch_qos::cpu::Allocation;

use crate::bandwidth::{BandwidthSla, LinkSpec};
use crate::cpu_qos::CpuQos;
use crate::link_policy::{EgressSpec, VmLinkSpec};
use crate::policing::PolicingSpec;
use crate::port::PortSpec;
use crate::port_settings::PortSettings;

/// What one port is to get.
#[derive(Clone, Debug, PartialEq)]
pub struct PortPlan {
    /// Its C2QoS settings, with the model's cycles filled in.
    pub cpu_qos: CpuQos,
    /// Its ingress policing.
    pub policing: Option<PolicingSpec>,
    /// Descriptors of its tx ring, which a paced link's queue matches.
    pub tx_ring_descriptors: u16,
    /// What its VM purchased.
    pub sla: Option<BandwidthSla>,
    /// The model's working when the cycles come from it.
    pub allocation: Option<Allocation>,
    /// Its line rate and uplink role.
    pub link: LinkSpec,
    /// Its link's scheduler, when paced.
    pub egress: EgressSpec,
    /// Its settings on paced ports' schedulers.
    pub vm_link: VmLinkSpec,
}

/// A port as the planner sees it.
pub struct Candidate<'a> {
    /// Its configuration.
    pub spec: &'a PortSpec,
    /// Its options as typed settings, parsed once when they were set ([`PortSpec::validate`]).
    pub settings: &'a PortSettings,
    /// The core of the PMD that would poll it.
    pub pmd_core: usize,
}
