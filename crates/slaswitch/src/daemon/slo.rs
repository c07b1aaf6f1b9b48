//! Latency SLOs kept, second by second: for every port whose purchase has `latency_p99_us`,
//! whether its frames' residence p99 over each sampling interval (1 s) stayed under it, and
//! for each second it did not, why.
//!
//! The cause is read from what the switch measured in that second, in this order:
//! * `pmd_stall`: the frames no stall of the PMD touched kept the SLO, and some were touched
//!   (a stage of the loop took over 100 us while they were in the switch:
//!   `slaswitch_datapath` residence): the host took the PMD's core; no scheduler in the switch
//!   can keep a promise through that, and `docs/operations.md` says how to keep the core quiet;
//! * `link_queue`: most of the p99 was the paced links' queues (the port's link wait p99 is at
//!   least half of it): the link's scheduler, its latency class off, or the link over-sold;
//! * `cycle_tokens`: the port waited for its own cycle tokens in that second (C2TB held it to
//!   its allocation and its latency class did not forgive the debt): its frames cost the PMD
//!   more than its purchase pays for, so the purchase, not the switch, is what to change;
//! * `switch`: the rest: waiting for the PMD and its stages (the PMD's scheduler, a neighbour's
//!   batches).

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
                missed_by_cause: MissCause::ALL.iter().map(|&c| (c, 0)).collect(),
                last_miss: None,
            });
            status.latency_p99_us = slo_us;
            let Some(o) = old.ports.iter().find(|o| o.name == p.name && o.number == p.number) else { continue };
            let stalled_us = host_took_cycles(old, new, p.pmd_core, tsc_hz) as f64 * 1e6 / tsc_hz.max(1) as f64;
            let at_secs = new.at.duration_since(started).as_secs_f64();
            let second = Second {
                residence: p.residence.since(&o.residence),
                unstalled: p.residence_unstalled.since(&o.residence_unstalled),
                link_wait: p.link_wait.since(&o.link_wait),
                token_waits: p.cpu_qos.token_waits.saturating_sub(o.cpu_qos.token_waits),
            };
            if let Some(miss) = judge(&second, slo_us, stalled_us, at_secs) {
                status.missed_seconds += 1;
                *status.missed_by_cause.entry(miss.cause).or_default() += 1;
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

/// A port's frames over one second: their residence, the part of it no stall of the PMD
/// touched, and their wait in paced queues; and the times the port waited for cycle tokens.
struct Second {
    residence: Histogram,
    unstalled: Histogram,
    link_wait: Histogram,
    token_waits: u64,
}

/// The miss, if `second` missed `slo_us`.
fn judge(second: &Second, slo_us: u32, stalled_us: f64, at_secs: f64) -> Option<SloMiss> {
    let us = |h: &Histogram| h.quantile_ns(0.99).map(|ns| ns as f64 / 1e3);
    let p99_us = us(&second.residence)?;
    let slo = f64::from(slo_us);
    if p99_us <= slo {
        return None;
    }
    let link_wait_p99_us = us(&second.link_wait).unwrap_or(0.0);
    let unstalled_p99_us = us(&second.unstalled);
    let touched = second.residence.count() > second.unstalled.count();
    let cause = if touched && unstalled_p99_us.is_none_or(|p99| p99 <= slo) {
        MissCause::PmdStall
    } else if link_wait_p99_us >= p99_us / 2.0 {
        MissCause::LinkQueue
    } else if second.token_waits > 0 {
        MissCause::CycleTokens
    } else {
        MissCause::Switch
    };
    Some(SloMiss { at_secs, p99_us, link_wait_p99_us, stalled_us, unstalled_p99_us, cause })
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

    fn second(residence: &Histogram, unstalled: &Histogram, link_wait: &Histogram) -> Second {
        Second {
            residence: residence.clone(),
            unstalled: unstalled.clone(),
            link_wait: link_wait.clone(),
            token_waits: 0,
        }
    }

    #[test]
    fn a_missed_second_is_put_down_to_what_the_switch_measured() {
        let fast = of(&[10; 100]);
        let none = Histogram::default();
        assert_eq!(judge(&second(&fast, &fast, &none), 50, 0.0, 1.0), None, "kept");
        assert_eq!(judge(&second(&none, &none, &none), 50, 0.0, 1.0), None, "no frame, no second");
        // 90 frames at 10 us, 10 at 400 us: no stall touched any of them.
        let slow = of(&[[10; 90].as_slice(), &[400; 10]].concat());
        let cause = |s: Second| judge(&s, 50, 0.0, 1.0).unwrap().cause;
        assert_eq!(cause(second(&slow, &slow, &none)), MissCause::Switch);
        let queued = of(&[[1; 90].as_slice(), &[300; 10]].concat());
        assert_eq!(cause(second(&slow, &slow, &queued)), MissCause::LinkQueue);
        let short_queue = of(&[[1; 90].as_slice(), &[100; 10]].concat());
        assert_eq!(cause(second(&slow, &slow, &short_queue)), MissCause::Switch);
        // A stall touched the ten slow frames: the others kept the SLO.
        assert_eq!(cause(second(&slow, &of(&[10; 90]), &queued)), MissCause::PmdStall);
        // It touched only two of them: the eight left still miss, the link's queue had them.
        let untouched = of(&[[10; 90].as_slice(), &[400; 8]].concat());
        assert_eq!(cause(second(&slow, &untouched, &queued)), MissCause::LinkQueue);
        // Every frame touched.
        let miss = judge(&second(&slow, &none, &none), 50, 500.0, 1.0).unwrap();
        assert_eq!((miss.cause, miss.unstalled_p99_us), (MissCause::PmdStall, None));
        // The port waited for its own cycle tokens: its purchase, unless a stall or the link's
        // queue explains the second first.
        let waited = |s: Second| Second { token_waits: 2, ..s };
        assert_eq!(cause(waited(second(&slow, &slow, &none))), MissCause::CycleTokens);
        assert_eq!(cause(waited(second(&slow, &slow, &queued))), MissCause::LinkQueue);
        assert_eq!(cause(waited(second(&slow, &of(&[10; 90]), &none))), MissCause::PmdStall);
    }
}
