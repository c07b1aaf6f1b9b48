//! Latency SLOs kept, second by second: for every port whose purchase has `latency_p99_us`,
//! whether its frames' residence p99 over each sampling interval (1 s) stayed under it, and
//! for each second it did not, why.
//!
//! The cause is read from what the switch measured in that second, in this order:
//! * `pmd_stall`: the host took at least the SLO's time from the port's PMD (the PMD's stall
//!   counter, capped by the time its thread did not run:
//!   `crate::daemon::rates::host_took_cycles`); no scheduler in the switch can keep a promise
//!   through that, and `docs/operations.md` says how to keep the core quiet;
//! * `link_queue`: most of the p99 was the paced links' queues (the port's link wait p99 is at
//!   least half of it): the link's scheduler, its latency class off, or the link over-sold;
//! * `switch`: the rest: waiting for the PMD and its stages (the PMD's scheduler, a neighbour's
//!   batches, or the port sending beyond its purchase).

use std::collections::BTreeMap;

use slaswitch_datapath::histogram::Histogram;

use super::rates::{host_took_cycles, Snapshot};
use crate::protocol::slo::{MissCause, SloMiss, SloStatus};

/// Every port's SLO status, by port name and number (a port added again starts afresh).
#[derive(Debug, Default)]
pub struct SloLedger {
    ports: BTreeMap<(String, u16), SloStatus>,
    started: Option<std::time::Instant>,
}

impl SloLedger {
    /// Counts the interval from `old` to `new`.
    pub fn observe(&mut self, old: &Snapshot, new: &Snapshot, tsc_hz: u64) {
        let started = *self.started.get_or_insert(old.at);
        self.ports.retain(|(name, number), _| new.ports.iter().any(|p| &p.name == name && p.number == *number));
        for p in &new.ports {
            let key = (p.name.clone(), p.number);
            let Some(slo_us) = p.latency_p99_us else {
                self.ports.remove(&key);
                continue;
            };
            let status = self.ports.entry(key).or_insert_with(|| SloStatus {
                latency_p99_us: slo_us,
                seconds: 0,
                missed_seconds: 0,
                missed_by_cause: [0; 3],
                last_miss: None,
            });
            status.latency_p99_us = slo_us;
            let Some(o) = old.ports.iter().find(|o| o.name == p.name && o.number == p.number) else { continue };
            let stalled_us = host_took_cycles(old, new, p.pmd_core, tsc_hz) as f64 * 1e6 / tsc_hz.max(1) as f64;
            let at_secs = new.at.duration_since(started).as_secs_f64();
            let second = (p.residence.since(&o.residence), p.link_wait.since(&o.link_wait));
            if let Some(miss) = judge(&second.0, &second.1, slo_us, stalled_us, at_secs) {
                status.missed_seconds += 1;
                status.missed_by_cause[miss.cause as usize] += 1;
                status.last_miss = Some(miss);
            }
            if p.residence.count() > o.residence.count() {
                status.seconds += 1;
            }
        }
    }

    /// A port's status, if it has an SLO.
    pub fn status(&self, name: &str) -> Option<SloStatus> {
        self.ports.iter().find(|((n, _), _)| n == name).map(|(_, s)| s.clone())
    }

    /// Every port's status.
    pub fn all(&self) -> Vec<(String, SloStatus)> {
        self.ports.iter().map(|((n, _), s)| (n.clone(), s.clone())).collect()
    }
}

/// The miss, if a second of `residence` (of which `link_wait` in paced queues) missed `slo_us`.
fn judge(residence: &Histogram, link_wait: &Histogram, slo_us: u32, stalled_us: f64, at_secs: f64) -> Option<SloMiss> {
    let p99_us = residence.quantile_ns(0.99)? as f64 / 1e3;
    if p99_us <= f64::from(slo_us) {
        return None;
    }
    let link_wait_p99_us = link_wait.quantile_ns(0.99).map_or(0.0, |ns| ns as f64 / 1e3);
    let cause = if stalled_us >= f64::from(slo_us) {
        MissCause::PmdStall
    } else if link_wait_p99_us >= p99_us / 2.0 {
        MissCause::LinkQueue
    } else {
        MissCause::Switch
    };
    Some(SloMiss { at_secs, p99_us, link_wait_p99_us, stalled_us, cause })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(samples_us: &[u64]) -> Histogram {
        let mut h = Histogram::default();
        for &us in samples_us {
            h.record(us * 1_000);
        }
        h
    }

    #[test]
    fn a_missed_second_is_put_down_to_what_the_switch_measured() {
        let fast = of(&[10; 100]);
        let none = Histogram::default();
        assert_eq!(judge(&fast, &none, 50, 0.0, 1.0), None, "kept");
        assert_eq!(judge(&none, &none, 50, 0.0, 1.0), None, "no frame, no second");
        let slow = of(&[[10; 90].as_slice(), &[400; 10]].concat());
        let miss = |link_wait: &Histogram, stalled_us| judge(&slow, link_wait, 50, stalled_us, 1.0).unwrap().cause;
        assert_eq!(miss(&none, 0.0), MissCause::Switch);
        assert_eq!(miss(&of(&[[1; 90].as_slice(), &[300; 10]].concat()), 0.0), MissCause::LinkQueue);
        assert_eq!(miss(&of(&[[1; 90].as_slice(), &[300; 10]].concat()), 60.0), MissCause::PmdStall);
        assert_eq!(miss(&of(&[[1; 90].as_slice(), &[100; 10]].concat()), 10.0), MissCause::Switch);
    }
}
