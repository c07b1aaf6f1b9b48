//! The CPU decision point: which port a PMD thread serves next, and whether it may
//! (C2QoS, seed 000 Sec. IV; seed 001 Sec. III).

pub mod c2tb;
pub mod c2tb_fluid;
pub mod drift;
pub mod fallback;
pub mod hbs;
pub mod latency_class;
pub mod model;
pub mod promise;
mod ready;
pub mod water_fill;

/// A port's index inside one PMD's scheduler: small and dense, chosen by the data plane.
pub type PortIndex = usize;

pub use c2tb::{C2tbConfig, CycleBuckets, CycleLimit, CyclePool, RefillMode};
pub use drift::{DriftCompensator, DriftConfig, PortWindow};
pub use fallback::{FallbackConfig, FallbackDetector};
pub use hbs::{worst_case_wait_cycles, HbsConfig, PortPlace, PortScheduler, PortView, WaitCounts, PRIORITY_CLASSES};
pub use model::{Allocation, BandwidthModel, Deployment, FlowCount, TrafficProfile};
pub use promise::{LedgerWindow, PromiseConfig, PurchaseLedger};
