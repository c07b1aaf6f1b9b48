#![warn(missing_docs)]
//! slaswitch-qos: every scheduler of the seed papers as plain data structures.
//!
//! No I/O, no threads, no clock of its own: every call that depends on time takes the current
//! time as an argument (`now_tsc` in TSC cycles on the CPU side, `now_ns` in nanoseconds on the
//! link side). The real data plane passes `rdtsc` / a monotonic clock; the host simulator and the
//! tests pass a fake clock. That is what lets one implementation serve both drivers.
//!
//! Two decision points share one vocabulary (a port or queue is a small dense index chosen by
//! the caller):
//! 1. [`cpu`]: which port a PMD thread serves next, and whether it may (C2QoS, seeds 000/001).
//! 2. [`egress`]: which queued packet goes next onto a shared link (ANCS 002, SoftBW 003,
//!    PIE-VDE 004).
//!
//! [`overcommit`] is SoftBW's failure model of over-committed guarantees (seed 003 Sec. 2.2),
//! which the simulator and a provider's placement use.
//!
//! [`pricing`] is SoftBW's usage-based charge per billing cycle (seed 003 Sec. 3.3).
//!
//! [`meter`] holds the baselines the seeds compare against: srTCM, trTCM and a packet-rate
//! bucket applied after rx, the way OVS ingress policing works.

pub mod cpu;
pub mod egress;
pub mod error;
pub mod link;
pub mod meter;
pub mod overcommit;
pub mod placement;
pub mod pricing;
pub mod timer_wheel;

pub use error::QosError;

/// Nanoseconds per second, used when converting rates in bits or bytes per second.
pub const NS_PER_SEC: u64 = 1_000_000_000;
