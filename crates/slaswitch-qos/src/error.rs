//! Why a scheduler or a meter refused its settings. The configuration crate validates what an
//! operator gives before any of these run, so these mostly guard the mechanisms' own invariants;
//! each still names the value and what is allowed.

/// A refused setting of a scheduler, a meter or the model.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QosError {
    /// A value outside what it may be.
    #[error("{setting}: {allowed}")]
    Setting {
        /// The setting and its value, e.g. `beta=2`.
        setting: String,
        /// What it may be.
        allowed: String,
    },
    /// A mechanism's parameters it cannot run with.
    #[error("{0}")]
    Unusable(&'static str),
    /// A queue's settings.
    #[error("queue {queue}: {why}")]
    Queue {
        /// The queue.
        queue: usize,
        /// What is wrong.
        why: &'static str,
    },
    /// A queue's minimum above its maximum.
    #[error("queue {queue}: minimum {min_bps} bit/s is above the maximum {max_bps} bit/s")]
    MinAboveMax {
        /// The queue.
        queue: usize,
        /// Its minimum.
        min_bps: u64,
        /// Its maximum.
        max_bps: u64,
    },
    /// Minimum rates that add up to more than the link.
    #[error("minimums would add up to {total_bps} bit/s, more than the link's {link_bps} bit/s")]
    MinimumsAboveLink {
        /// Their sum.
        total_bps: u64,
        /// The link's rate.
        link_bps: u64,
    },
    /// A queue names a tenant that does not exist.
    #[error("queue {queue}: tenant {tenant} does not exist")]
    NoTenant {
        /// The queue.
        queue: usize,
        /// The tenant it names.
        tenant: usize,
    },
    /// A tenant's weight of 0.
    #[error("tenant {0}: weight must be at least 1")]
    TenantWeight(usize),
    /// A tenant removed while VMs name it.
    #[error("tenant {0} still has VMs")]
    TenantInUse(usize),
    /// A C2QoS class outside 1 to 8.
    #[error("priority {0} is out of range: classes are 1 (highest) to 8")]
    Priority(u8),
    /// A port added twice to one PMD's scheduler.
    #[error("port {0} is already scheduled on this PMD")]
    PortScheduled(usize),
    /// A port the PMD's scheduler does not have.
    #[error("port {0} is not scheduled on this PMD")]
    PortNotScheduled(usize),
    /// A port index beyond the scheduler's ready queues.
    #[error("port index {port} is too large: at most {max}")]
    PortIndex {
        /// The index.
        port: usize,
        /// The largest one.
        max: usize,
    },
    /// The bandwidth-CPU model has no row for a profile's flow count.
    #[error("the bandwidth model has no rows for {flows} flows: run slaswitch calibrate")]
    NoModelRows {
        /// `single` or `many`.
        flows: &'static str,
    },
    /// A profile's frame size outside the model's rows.
    #[error("profile_packet_bytes={packet_bytes}: the model covers {min_bytes} to {max_bytes} bytes")]
    OutsideModel {
        /// The profile's frame size.
        packet_bytes: u32,
        /// The model's smallest row.
        min_bytes: u32,
        /// Its largest.
        max_bytes: u32,
    },
    /// A trTCM whose peak rate is below its committed rate.
    #[error("trTCM peak rate {pir_bytes_per_sec} B/s is below the committed rate {cir_bytes_per_sec} B/s (RFC 2698 needs PIR >= CIR)")]
    PeakBelowCommitted {
        /// The peak rate.
        pir_bytes_per_sec: u64,
        /// The committed rate.
        cir_bytes_per_sec: u64,
    },
}

impl QosError {
    /// A value outside what it may be.
    pub fn setting(setting: impl Into<String>, allowed: impl Into<String>) -> QosError {
        QosError::Setting { setting: setting.into(), allowed: allowed.into() }
    }
}
