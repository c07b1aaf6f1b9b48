//! What an agent reports every billing cycle (seed 003 Sec. 3.3): per VM the bytes it sent, from
//! the data plane's own cumulative counters, and the guarantee in force.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A VM's cumulative counters as the switch reads them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmCounters {
    /// The VM (its port).
    pub vm: String,
    /// Bytes it has sent since its port (or its queue on the uplink) was created.
    pub sent_bytes: u64,
    /// The rate its scheduler guarantees it now, bits/s (0: none).
    pub guarantee_bps: u64,
}

/// One VM's line of a report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmUsage {
    /// The VM.
    pub vm: String,
    /// Bytes sent within the cycle.
    pub bytes: u64,
    /// The guarantee in force at the cycle's end, bits/s.
    pub guarantee_bps: u64,
}

/// One host's report for one billing cycle (etcd `usage/HOST/CYCLE`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageReport {
    /// The reporting host.
    pub host: String,
    /// The cycle: its end, in Unix time divided by the cycle's length.
    pub cycle: u64,
    /// The cycle's length, milliseconds.
    pub cycle_ms: u64,
    /// The time the counters actually cover, seconds (a cycle is measured, not assumed).
    pub secs: f64,
    /// When the counters were read, Unix milliseconds.
    pub read_unix_ms: u64,
    /// Every VM port the host had.
    pub vms: Vec<VmUsage>,
}

/// The value of a `usage/HOST/CYCLE` key: one cycle's report, or the reports of consecutive
/// cycles written together (an agent writing every few cycles), named by the first. Each
/// cycle is billed on its own either way.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum UsageValue {
    /// One cycle.
    One(UsageReport),
    /// Consecutive cycles, oldest first.
    Many(Vec<UsageReport>),
}

impl UsageValue {
    /// `reports` as one value: a lone report as itself.
    pub fn of(mut reports: Vec<UsageReport>) -> UsageValue {
        match reports.len() {
            1 => UsageValue::One(reports.remove(0)),
            _ => UsageValue::Many(reports),
        }
    }

    /// Its reports, oldest first.
    pub fn into_reports(self) -> Vec<UsageReport> {
        match self {
            UsageValue::One(r) => vec![r],
            UsageValue::Many(rs) => rs,
        }
    }
}

/// Turns cumulative counters into per-cycle bytes. A counter that went backwards was
/// recreated (the port was deleted and added, or the uplink's scheduler changed): its whole
/// value is new.
#[derive(Debug, Default)]
pub struct Deltas {
    last: BTreeMap<String, u64>,
}

impl Deltas {
    /// The usage since the previous call; VMs gone since are forgotten.
    pub fn take(&mut self, now: &[VmCounters]) -> Vec<VmUsage> {
        let mut next = BTreeMap::new();
        let usage = now
            .iter()
            .map(|c| {
                let before = self.last.get(&c.vm).copied().unwrap_or(0);
                let bytes = if c.sent_bytes >= before { c.sent_bytes - before } else { c.sent_bytes };
                next.insert(c.vm.clone(), c.sent_bytes);
                VmUsage { vm: c.vm.clone(), bytes, guarantee_bps: c.guarantee_bps }
            })
            .collect();
        self.last = next;
        usage
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(vm: &str, sent_bytes: u64) -> VmCounters {
        VmCounters { vm: vm.into(), sent_bytes, guarantee_bps: 0 }
    }

    #[test]
    fn reports_written_together_read_back_as_each_cycle() {
        let report = |cycle: u64| UsageReport {
            host: "h1".into(),
            cycle,
            cycle_ms: 1000,
            secs: 1.0,
            read_unix_ms: cycle * 1000,
            vms: vec![VmUsage { vm: "a".into(), bytes: cycle, guarantee_bps: 0 }],
        };
        let one = serde_json::to_string(&UsageValue::of(vec![report(7)])).unwrap();
        assert!(one.starts_with('{'), "a lone report is written as one: {one}");
        let back: UsageValue = serde_json::from_str(&one).unwrap();
        assert_eq!(back.into_reports(), vec![report(7)]);
        let many = serde_json::to_string(&UsageValue::of(vec![report(7), report(8), report(9)])).unwrap();
        let back: UsageValue = serde_json::from_str(&many).unwrap();
        assert_eq!(back.into_reports(), vec![report(7), report(8), report(9)]);
        assert!(serde_json::from_str::<UsageValue>(r#"{"host": "h1"}"#).is_err());
    }

    #[test]
    fn deltas_sum_to_the_counters_and_survive_a_reset() {
        let mut d = Deltas::default();
        assert_eq!(d.take(&[c("a", 100)])[0].bytes, 100);
        assert_eq!(d.take(&[c("a", 250), c("b", 7)]).iter().map(|u| u.bytes).collect::<Vec<_>>(), [150, 7]);
        // a recreated: its counter restarted.
        assert_eq!(d.take(&[c("a", 30), c("b", 7)]).iter().map(|u| u.bytes).collect::<Vec<_>>(), [30, 0]);
        // b gone and back: counted from zero.
        d.take(&[c("a", 30)]);
        assert_eq!(d.take(&[c("b", 9)])[0].bytes, 9);
    }
}
