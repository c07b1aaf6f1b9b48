//! What `qos-show` and the metrics say of ports moved between PMDs: each move, why, and how long
//! the PMDs took (`crate::daemon` decides them with `slaswitch_config::pmd_placement`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use slaswitch_config::pmd_placement::MoveReason;

/// One move of a port from one PMD to another.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PmdMove {
    /// Seconds since the daemon started.
    pub at_secs: f64,
    /// The port.
    pub port: String,
    /// The core of the PMD that polled it.
    pub from_core: usize,
    /// The core of the PMD that polls it now.
    pub to_core: usize,
    /// Why it moved.
    pub reason: MoveReason,
    /// A port that went the other way at the same time (a swap).
    #[serde(default)]
    pub swapped_with: Option<String>,
    /// From the first PMD's release to the second's pick-up, microseconds.
    pub took_us: u64,
    /// Why the data plane refused it, if it did (nothing moved then).
    pub refused: Option<String>,
}

/// The switch's moves so far.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PmdMoves {
    /// Whether the switch moves ports by itself (`slaswitchd --pmd-rebalance`).
    pub enabled: bool,
    /// Moves made, by reason (`over_promised`, `saturated`).
    pub total: BTreeMap<String, u64>,
    /// The latest moves, oldest first.
    pub recent: Vec<PmdMove>,
}
