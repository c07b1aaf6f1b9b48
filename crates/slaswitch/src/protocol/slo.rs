//! What `qos-show` and the metrics say of a port's latency SLO (`latency_p99_us`): seconds
//! kept and missed, and why each missed (`crate::daemon` keeps the count).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Why a second missed its SLO.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
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
    /// Missed seconds by cause, every cause present (by name in JSON, so a reader needs no
    /// list of its own).
    pub missed_by_cause: BTreeMap<MissCause, u64>,
    /// The last second that missed.
    pub last_miss: Option<SloMiss>,
}

impl SloStatus {
    /// Missed seconds of one cause.
    pub fn missed(&self, cause: MissCause) -> u64 {
        self.missed_by_cause.get(&cause).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missed_seconds_are_keyed_by_cause_name_in_json() {
        let mut status = SloStatus {
            latency_p99_us: 500,
            seconds: 10,
            missed_seconds: 2,
            missed_by_cause: MissCause::ALL.iter().map(|&c| (c, 0)).collect(),
            last_miss: None,
        };
        *status.missed_by_cause.get_mut(&MissCause::CycleTokens).expect("every cause") += 2;
        let json = serde_json::to_value(&status).expect("serializes");
        assert_eq!(json["missed_by_cause"]["cycle_tokens"], 2);
        assert_eq!(json["missed_by_cause"]["pmd_stall"], 0);
        let back: SloStatus = serde_json::from_value(json).expect("reads back");
        assert_eq!((back.missed(MissCause::CycleTokens), back.missed(MissCause::Switch)), (2, 0));
    }
}
