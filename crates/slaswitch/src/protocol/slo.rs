//! What `qos-show` and the metrics say of a port's latency SLO (`latency_p99_us`): seconds
//! kept and missed, and why each missed (`crate::daemon` keeps the count).

use serde::{Deserialize, Serialize};

/// Why a second missed its SLO.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissCause {
    /// Waiting for the PMD and its stages.
    Switch,
    /// The paced links' queues.
    LinkQueue,
    /// The host took the PMD's core.
    PmdStall,
    /// The port waited for its own cycle tokens: its frames cost more cycles than its
    /// purchase pays for, beyond what its latency class forgives.
    CycleTokens,
}

impl MissCause {
    /// Every cause, in the order reports list them.
    pub const ALL: [MissCause; 4] =
        [MissCause::Switch, MissCause::LinkQueue, MissCause::PmdStall, MissCause::CycleTokens];

    /// Its name in reports and metrics.
    pub fn name(self) -> &'static str {
        match self {
            MissCause::Switch => "switch",
            MissCause::LinkQueue => "link_queue",
            MissCause::PmdStall => "pmd_stall",
            MissCause::CycleTokens => "cycle_tokens",
        }
    }
}

/// One second that missed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SloMiss {
    /// Seconds since the daemon started, at the end of the interval.
    pub at_secs: f64,
    /// The residence p99 of that second, microseconds.
    pub p99_us: f64,
    /// The paced links' queue wait p99 of that second, microseconds.
    pub link_wait_p99_us: f64,
    /// Microseconds the host took from the port's PMD in that second.
    pub stalled_us: f64,
    /// The residence p99 of that second's frames no stall of the PMD touched, microseconds
    /// (`None`: every frame was touched).
    #[serde(default)]
    pub unstalled_p99_us: Option<f64>,
    /// Why.
    pub cause: MissCause,
}

/// A port's SLO and how it has been kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SloStatus {
    /// The SLO: residence p99, microseconds.
    pub latency_p99_us: u32,
    /// Seconds in which it sent frames the switch timed.
    pub seconds: u64,
    /// Of those, seconds whose p99 was above the SLO.
    pub missed_seconds: u64,
    /// Missed seconds by cause, in [`MissCause::ALL`]'s order.
    pub missed_by_cause: [u64; 4],
    /// The last second that missed.
    pub last_miss: Option<SloMiss>,
}

impl SloStatus {
    /// Missed seconds of one cause.
    pub fn missed(&self, cause: MissCause) -> u64 {
        self.missed_by_cause[cause as usize]
    }
}
