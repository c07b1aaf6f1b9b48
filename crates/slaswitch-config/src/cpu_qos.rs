//! Per-port C2QoS settings (seed 000 Sec. IV): how many PMD cycles a port may use and in which
//! priority class it is served. Options, all changed live:
//!
//! | option           | meaning                                                          |
//! |------------------|------------------------------------------------------------------|
//! | `cycles_per_sec` | the port's cycle allocation (the paper's `ingress_policing_cpucycles`), at most 10^11; 0 or absent: from `bandwidth_bps` and the model ([`crate::allocation`]), or unlimited |
//! | `mode`           | `strict` (never more than the allocation) or `min-max` (at least the allocation, plus a weighted share of idle cycles; Algorithm 1) |
//! | `weight`         | the min-max share weight (default 1)                             |
//! | `priority`       | class 1 (served first) to 8 (default)                            |
//!
//! A PMD whose ports carry none of these runs the plain round robin, with no scheduler cost.

use std::collections::BTreeMap;

use slaswitch_qos::cpu::hbs::DEFAULT_PRIORITY;
use slaswitch_qos::cpu::CycleLimit;

use crate::ranges::number_in;

/// The most cycles a port may be given a second: beyond any core (100 GHz), so a typo of a
/// few digits is refused instead of meaning "the whole core".
pub const MAX_CYCLES_PER_SEC: u64 = 100_000_000_000;

/// The options of this module.
pub const CPU_QOS_OPTIONS: &[&str] = &["cycles_per_sec", "mode", "weight", "priority"];

/// A port's C2QoS settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuQos {
    /// Its cycle limit.
    pub limit: CycleLimit,
    /// Its class, 1 (served first) to 8.
    pub priority: u8,
    /// `mode=min-max`, kept for an allocation that comes from the model.
    min_max: bool,
    weight: u32,
    /// The depth of its bucket when it needs its own (a purchase: one ring of its profile's
    /// packets), in cycles; `None`: the switch's (`docs/deviations.md`, bucket depth).
    pub bucket_depth_cycles: Option<u64>,
}

/// An own bucket depth `own` in force when the allocation is scaled by `drift_factor`: scaled
/// with it (the ring's packets cost that much more or less), never below the switch's.
pub fn own_bucket_depth(own: Option<u64>, drift_factor: f64, switch_depth_cycles: u64) -> Option<u64> {
    own.map(|d| ((d as f64 * drift_factor) as u64).max(switch_depth_cycles))
}

impl Default for CpuQos {
    fn default() -> Self {
        CpuQos {
            limit: CycleLimit::Unlimited,
            priority: DEFAULT_PRIORITY,
            min_max: false,
            weight: 1,
            bucket_depth_cycles: None,
        }
    }
}

impl CpuQos {
    /// Reads the options of this module.
    pub fn from_options(options: &BTreeMap<String, String>) -> Result<CpuQos, crate::error::ConfigError> {
        let cycles = number_in(options, "cycles_per_sec", 0..=MAX_CYCLES_PER_SEC)?.unwrap_or(0);
        let weight = number_in(options, "weight", 1..=u32::MAX)?.unwrap_or(1);
        let priority = number_in(options, "priority", 1..=8u8)?.unwrap_or(DEFAULT_PRIORITY);
        let mode = options.get("mode").map(String::as_str).unwrap_or("strict");
        let limit = match (cycles, mode) {
            (_, m) if m != "strict" && m != "min-max" => {
                return Err(crate::error::ConfigError::value("mode", m, "strict or min-max"))
            }
            (0, _) => CycleLimit::Unlimited,
            (c, "strict") => CycleLimit::Strict { cycles_per_sec: c },
            (c, _) => CycleLimit::MinMax { cycles_per_sec: c, weight },
        };
        Ok(CpuQos { limit, priority, min_max: mode == "min-max", weight, bucket_depth_cycles: None })
    }

    /// The same settings with an allocation of `cycles_per_sec` (from the bandwidth model).
    pub fn with_cycles(self, cycles_per_sec: u64) -> CpuQos {
        let limit = if self.min_max {
            CycleLimit::MinMax { cycles_per_sec, weight: self.weight }
        } else {
            CycleLimit::Strict { cycles_per_sec }
        };
        CpuQos { limit, ..self }
    }

    /// The MIN-MAX share weight (1 unless set).
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// The port's own bucket depth in force when its allocation is scaled by `drift_factor`,
    /// never below the switch's `switch_depth_cycles`; `None` when it keeps the switch's.
    pub fn own_bucket_depth(&self, drift_factor: f64, switch_depth_cycles: u64) -> Option<u64> {
        own_bucket_depth(self.bucket_depth_cycles, drift_factor, switch_depth_cycles)
    }

    /// True when the port needs the scheduler (a limit or a class other than the default).
    pub fn is_set(&self) -> bool {
        self.limit != CycleLimit::Unlimited || self.priority != DEFAULT_PRIORITY
    }
}
