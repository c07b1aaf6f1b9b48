//! The receiving side: counts packets and bytes per source per interval, and one-way latency
//! from the TSC stamp the sender wrote (same host, same TSC). Each sink VM also announces its
//! MAC address once per interval with a broadcast frame, so a MAC-learning switch finds it.

use std::collections::BTreeMap;

use serde::Serialize;
use slaswitch_dpdk::{free_bulk, rdtsc, EthPort, Mbuf, Mempool, MAX_BURST};

use super::frames::{ip_for, mac_for, mac_text, read_stamp, sender_id, write_frame};
use super::latency::Histogram;

pub struct SinkVm {
    pub name: String,
    pub port: EthPort,
}

#[derive(Clone, Debug, Serialize)]
pub struct SinkRecord {
    pub t_secs: f64,
    pub sink: String,
    pub source: String,
    pub packets: u64,
    pub bytes: u64,
    pub kpps: f64,
    pub mbps: f64,
    pub latency_samples: u64,
    pub lat_p50_us: Option<f64>,
    pub lat_p90_us: Option<f64>,
    pub lat_p99_us: Option<f64>,
    pub lat_max_us: Option<f64>,
}

#[derive(Default, Clone)]
struct Tally {
    packets: u64,
    bytes: u64,
    latency: Histogram,
}

/// Totals over the whole run, per (sink, source).
#[derive(Clone, Debug, Serialize)]
pub struct SinkTotal {
    pub sink: String,
    pub source: String,
    pub packets: u64,
    pub bytes: u64,
    pub lat_p50_us: Option<f64>,
    pub lat_p99_us: Option<f64>,
    pub lat_max_us: Option<f64>,
}

fn us(ns: Option<u64>) -> Option<f64> {
    ns.map(|n| n as f64 / 1e3)
}

fn announce(pool: &Mempool, vm: &SinkVm) {
    let mut m = [Mbuf(std::ptr::NonNull::dangling()); 1];
    if pool.alloc_bulk(&mut m) {
        m[0].set_len(64);
        write_frame(m[0].data_mut(), mac_for(&vm.name), ip_for(&vm.name), [0xff; 6], [255, 255, 255, 255], 0);
        if vm.port.tx_burst(&mut m) == 0 {
            free_bulk(&m);
        }
    }
}

/// Receives for `duration_secs`; `sources` names the senders to expect (others are shown by MAC
/// or sender id). Calls `report` per (sink, source) each interval; returns the run's totals.
pub fn run(
    vms: &[SinkVm],
    sources: &[String],
    pool: &Mempool,
    tsc_hz: u64,
    duration_secs: f64,
    interval_secs: f64,
    mut report: impl FnMut(&SinkRecord),
) -> Vec<SinkTotal> {
    let names: BTreeMap<u16, String> = sources.iter().map(|s| (sender_id(s), s.clone())).collect();
    let start = rdtsc();
    let hz = tsc_hz as f64;
    let ns_per_tick = 1e9 / hz;
    let mut interval: BTreeMap<(usize, String), Tally> = BTreeMap::new();
    let mut total: BTreeMap<(usize, String), Tally> = BTreeMap::new();
    let mut next_report = interval_secs;
    let mut rx = [Mbuf(std::ptr::NonNull::dangling()); MAX_BURST];
    for vm in vms {
        announce(pool, vm);
    }
    // Labels are looked up once per sender id and cached.
    let mut labels: BTreeMap<u16, String> = BTreeMap::new();
    loop {
        let now = rdtsc();
        let t = (now - start) as f64 / hz;
        if t >= duration_secs {
            break;
        }
        for (i, vm) in vms.iter().enumerate() {
            let n = vm.port.rx_burst(&mut rx);
            if n == 0 {
                continue;
            }
            let arrival = rdtsc();
            for m in &rx[..n] {
                let frame = m.data();
                let (source, latency) = match read_stamp(frame) {
                    Some((id, _seq, tsc)) => {
                        let label = labels.entry(id).or_insert_with(|| names.get(&id).cloned().unwrap_or_else(|| format!("id-{id:04x}")));
                        (label.clone(), (arrival >= tsc).then(|| ((arrival - tsc) as f64 * ns_per_tick) as u64))
                    }
                    None if frame.len() >= 12 => (mac_text(frame[6..12].try_into().expect("6 bytes")), None),
                    None => ("runt".to_string(), None),
                };
                let tally = interval.entry((i, source)).or_default();
                tally.packets += 1;
                tally.bytes += u64::from(m.pkt_len());
                if let Some(l) = latency {
                    tally.latency.record(l);
                }
            }
            free_bulk(&rx[..n]);
        }
        if t >= next_report {
            for ((i, source), tally) in std::mem::take(&mut interval) {
                report(&SinkRecord {
                    t_secs: next_report,
                    sink: vms[i].name.clone(),
                    source: source.clone(),
                    packets: tally.packets,
                    bytes: tally.bytes,
                    kpps: tally.packets as f64 / interval_secs / 1e3,
                    mbps: tally.bytes as f64 * 8.0 / interval_secs / 1e6,
                    latency_samples: tally.latency.count(),
                    lat_p50_us: us(tally.latency.quantile_ns(0.5)),
                    lat_p90_us: us(tally.latency.quantile_ns(0.9)),
                    lat_p99_us: us(tally.latency.quantile_ns(0.99)),
                    lat_max_us: us((tally.latency.count() > 0).then(|| tally.latency.max_ns())),
                });
                let t = total.entry((i, source)).or_default();
                t.packets += tally.packets;
                t.bytes += tally.bytes;
                t.latency.merge(&tally.latency);
            }
            for vm in vms {
                announce(pool, vm);
            }
            next_report += interval_secs;
        }
    }
    for (key, tally) in interval {
        let t = total.entry(key).or_default();
        t.packets += tally.packets;
        t.bytes += tally.bytes;
        t.latency.merge(&tally.latency);
    }
    total
        .into_iter()
        .map(|((i, source), t)| SinkTotal {
            sink: vms[i].name.clone(),
            source,
            packets: t.packets,
            bytes: t.bytes,
            lat_p50_us: us(t.latency.quantile_ns(0.5)),
            lat_p99_us: us(t.latency.quantile_ns(0.99)),
            lat_max_us: us((t.latency.count() > 0).then(|| t.latency.max_ns())),
        })
        .collect()
}
