//! Each VM's and each host's measured utilization, one sample per billed cycle (seed 003
//! Sec. 2.2: the provider tracks utilization to choose how far to over-commit). A VM's sample
//! is its rate over its guarantee (over its host's link when it has none); a host's is all its
//! VMs' traffic over its link. The master keeps them in the billing store, updated in the
//! transaction that bills the cycle, and admits purchases with the VMs' mean rates.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One VM's billed cycle, as sampled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample<'a> {
    /// The VM.
    pub vm: &'a str,
    /// Its host.
    pub host: &'a str,
    /// The cycle.
    pub cycle: u64,
    /// Its rate in the cycle, bits/s.
    pub rate_bps: f64,
    /// Its guarantee, bits/s (0: none).
    pub guarantee_bps: f64,
}

/// Histogram buckets of utilization: [0, 0.1), [0.1, 0.2), ... [1.9, 2.0), then 2.0 and above.
pub const BUCKETS: usize = 21;
/// The width of a bucket.
pub const BUCKET_WIDTH: f64 = 0.1;

/// Samples of one VM's or host's utilization.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    /// Cycles sampled.
    pub samples: u64,
    /// The sum of the samples (utilization).
    pub sum_utilization: f64,
    /// The sum of the rates, bits/s (a VM's mean demand is this over `samples`).
    pub sum_rate_bps: f64,
    /// Samples per bucket ([`BUCKETS`] of [`BUCKET_WIDTH`]).
    pub histogram: Vec<u64>,
}

impl Distribution {
    /// Adds one cycle.
    pub fn add(&mut self, utilization: f64, rate_bps: f64) {
        if self.histogram.len() != BUCKETS {
            self.histogram.resize(BUCKETS, 0);
        }
        let u = if utilization.is_finite() { utilization.max(0.0) } else { 0.0 };
        self.samples += 1;
        self.sum_utilization += u;
        self.sum_rate_bps += rate_bps.max(0.0);
        self.histogram[((u / BUCKET_WIDTH) as usize).min(BUCKETS - 1)] += 1;
    }

    /// The mean utilization, if sampled.
    pub fn mean_utilization(&self) -> Option<f64> {
        (self.samples > 0).then(|| self.sum_utilization / self.samples as f64)
    }

    /// The mean rate, bits/s, if sampled.
    pub fn mean_rate_bps(&self) -> Option<f64> {
        (self.samples > 0).then(|| self.sum_rate_bps / self.samples as f64)
    }

    /// The `q` quantile (0..1) of the utilization, to a bucket's upper edge.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.samples == 0 {
            return None;
        }
        let want = (q.clamp(0.0, 1.0) * self.samples as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.histogram.iter().enumerate() {
            seen += n;
            if seen >= want {
                return Some((i + 1) as f64 * BUCKET_WIDTH);
            }
        }
        Some(BUCKETS as f64 * BUCKET_WIDTH)
    }
}

/// What a distribution belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Owner {
    /// A VM.
    Vm,
    /// A host.
    Host,
}

impl Owner {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Owner::Vm => "vm",
            Owner::Host => "host",
        }
    }
    /// From the store.
    pub fn parse(s: &str) -> Option<Owner> {
        match s {
            "vm" => Some(Owner::Vm),
            "host" => Some(Owner::Host),
            _ => None,
        }
    }
}

/// Every VM's and host's distribution.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UtilizationBook {
    /// By (owner, name).
    pub entries: BTreeMap<(Owner, String), Distribution>,
}

impl UtilizationBook {
    /// A VM's distribution.
    pub fn vm(&self, vm: &str) -> Option<&Distribution> {
        self.entries.get(&(Owner::Vm, vm.to_string()))
    }

    /// A host's distribution.
    pub fn host(&self, host: &str) -> Option<&Distribution> {
        self.entries.get(&(Owner::Host, host.to_string()))
    }

    /// Adds the samples of newly billed cycles; `capacity_bps` gives each host's link.
    /// Returns the keys that changed.
    pub fn account<'a>(
        &mut self,
        samples: impl IntoIterator<Item = Sample<'a>>,
        capacity_bps: impl Fn(&str) -> f64,
    ) -> Vec<(Owner, String)> {
        let mut hosts: BTreeMap<(&str, u64), f64> = BTreeMap::new();
        let mut changed = Vec::new();
        for r in samples {
            let c = capacity_bps(r.host);
            let over = if r.guarantee_bps > 0.0 { r.guarantee_bps } else { c };
            let key = (Owner::Vm, r.vm.to_string());
            self.entries.entry(key.clone()).or_default().add(r.rate_bps / over.max(1.0), r.rate_bps);
            changed.push(key);
            *hosts.entry((r.host, r.cycle)).or_default() += r.rate_bps;
        }
        for ((host, _), rate_bps) in hosts {
            let key = (Owner::Host, host.to_string());
            self.entries.entry(key.clone()).or_default().add(rate_bps / capacity_bps(host).max(1.0), rate_bps);
            changed.push(key);
        }
        changed.sort();
        changed.dedup();
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec<'a>(vm: &'a str, host: &'a str, cycle: u64, rate_bps: f64, guarantee_bps: f64) -> Sample<'a> {
        Sample { vm, host, cycle, rate_bps, guarantee_bps }
    }

    #[test]
    fn vms_are_sampled_over_their_guarantee_and_hosts_over_their_link() {
        let rs = [
            rec("a", "h", 1, 50e6, 100e6),
            rec("b", "h", 1, 200e6, 0.0),
            rec("a", "h", 2, 150e6, 100e6),
            rec("b", "h", 2, 0.0, 0.0),
        ];
        let mut book = UtilizationBook::default();
        let changed = book.account(rs, |_| 1e9);
        assert_eq!(changed.len(), 3);
        let a = book.vm("a").unwrap();
        assert_eq!((a.samples, a.mean_utilization(), a.mean_rate_bps()), (2, Some(1.0), Some(100e6)));
        assert_eq!(book.vm("b").unwrap().mean_utilization(), Some(0.1), "no guarantee: over the link");
        let h = book.host("h").unwrap();
        assert_eq!(h.samples, 2);
        assert!((h.mean_utilization().unwrap() - 0.2).abs() < 1e-12);
        // a's samples 0.5 and 1.5: its median is in the bucket [0.5, 0.6).
        assert!((a.quantile(0.5).unwrap() - 0.6).abs() < 1e-9);
        assert!((a.quantile(1.0).unwrap() - 1.6).abs() < 1e-9);
    }
}
