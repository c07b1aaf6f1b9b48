//! The receiving side: counts packets and bytes per source per interval, and one-way latency
//! from the TSC stamp the sender wrote (same host, same TSC). Each sink VM also announces its
//! MAC address once per interval with a broadcast frame, so a MAC-learning switch finds it.

use std::collections::BTreeMap;

use serde::Serialize;
use slaswitch_dpdk::{rdtsc, EthPort, MbufBatch, Mempool, MAX_BURST};

use slaswitch_datapath::histogram::Histogram;
use slaswitch_traffic::frames::{ip_for, mac_for, mac_text, read_stamp, sender_id, write_frame};

use super::run_for::RunFor;

/// One emulated VM that receives.
pub struct SinkVm {
    /// Its name.
    pub name: String,
    /// Its virtio-user device.
    pub port: EthPort,
}

/// What a sink received from one source in one interval.
#[derive(Clone, Debug, Serialize)]
pub struct SinkRecord {
    /// The interval's end, seconds since the start.
    pub t_secs: f64,
    /// The receiving VM.
    pub sink: String,
    /// The sending VM.
    pub source: String,
    /// Packets received.
    pub packets: u64,
    /// Bytes received.
    pub bytes: u64,
    /// Thousands of packets per second.
    pub kpps: f64,
    /// Megabits per second of frames.
    pub mbps: f64,
    /// Stamped packets whose latency was measured.
    pub latency_samples: u64,
    /// One-way latency percentiles and maximum, microseconds.
    pub lat_p50_us: Option<f64>,
    /// See `lat_p50_us`.
    pub lat_p90_us: Option<f64>,
    /// See `lat_p50_us`.
    pub lat_p99_us: Option<f64>,
    /// See `lat_p50_us`.
    pub lat_max_us: Option<f64>,
}

#[derive(Default, Clone)]
struct Tally {
    packets: u64,
    bytes: u64,
    latency: Histogram,
    out_of_order: u64,
}

/// Totals over the whole run, per (sink, source).
#[derive(Clone, Debug, Serialize)]
pub struct SinkTotal {
    /// The receiving VM.
    pub sink: String,
    /// The sending VM.
    pub source: String,
    /// Packets received.
    pub packets: u64,
    /// Bytes received.
    pub bytes: u64,
    /// One-way latency median, microseconds.
    pub lat_p50_us: Option<f64>,
    /// 99th percentile.
    pub lat_p99_us: Option<f64>,
    /// Maximum.
    pub lat_max_us: Option<f64>,
    /// Stamped frames that came after a later frame of the same sender (reordered).
    pub out_of_order: u64,
}

fn us(ns: Option<u64>) -> Option<f64> {
    ns.map(|n| n as f64 / 1e3)
}

fn announce(pool: &Mempool, vm: &SinkVm) {
    let mut m = MbufBatch::new();
    if m.alloc(pool, 1) {
        let frame = &mut m.as_mut_slice()[0];
        frame.set_len(64);
        write_frame(frame.data_mut(), mac_for(&vm.name), ip_for(&vm.name), [0xff; 6], [255, 255, 255, 255], 0);
        m.tx_burst(&vm.port);
    }
}

/// The receiving VMs' state: call [`Sink::poll`] in a loop and [`Sink::end_interval`] once per
/// interval. A sender process can own one too, so one core serves senders and sink in turn.
pub struct Sink<'a> {
    vms: &'a [SinkVm],
    names: BTreeMap<u16, String>,
    /// Labels looked up once per sender id.
    labels: BTreeMap<u16, String>,
    ns_per_tick: f64,
    interval: BTreeMap<(usize, String), Tally>,
    total: BTreeMap<(usize, String), Tally>,
    /// The highest sequence number seen per (sink VM, sender id).
    last_seq: BTreeMap<(usize, u16), u64>,
    rx: MbufBatch,
}

impl<'a> Sink<'a> {
    /// `sources` names the senders to expect (others are shown by MAC or sender id).
    pub fn new(vms: &'a [SinkVm], sources: &[String], pool: &Mempool, tsc_hz: u64) -> Sink<'a> {
        for vm in vms {
            announce(pool, vm);
        }
        Sink {
            vms,
            names: sources.iter().map(|s| (sender_id(s), s.clone())).collect(),
            labels: BTreeMap::new(),
            ns_per_tick: 1e9 / tsc_hz as f64,
            interval: BTreeMap::new(),
            total: BTreeMap::new(),
            last_seq: BTreeMap::new(),
            rx: MbufBatch::new(),
        }
    }

    /// Up to `MAX_BURSTS_PER_POLL` rx bursts from every sink VM, so a sink sharing its loop
    /// with senders keeps up with them.
    #[inline]
    pub fn poll(&mut self) {
        const MAX_BURSTS_PER_POLL: usize = 4;
        for (i, vm) in self.vms.iter().enumerate() {
            for _ in 0..MAX_BURSTS_PER_POLL {
                if self.poll_one(i, vm) < MAX_BURST {
                    break;
                }
            }
        }
    }

    #[inline]
    fn poll_one(&mut self, i: usize, vm: &SinkVm) -> usize {
        {
            let n = self.rx.rx_burst(&vm.port, MAX_BURST);
            if n == 0 {
                return 0;
            }
            let arrival = rdtsc();
            for m in self.rx.as_slice() {
                let frame = m.data();
                let mut reordered = false;
                let (source, latency) = match read_stamp(frame) {
                    Some((id, seq, tsc)) => {
                        let last = self.last_seq.entry((i, id)).or_insert(0);
                        reordered = seq < *last;
                        *last = (*last).max(seq);
                        let names = &self.names;
                        let label = self
                            .labels
                            .entry(id)
                            .or_insert_with(|| names.get(&id).cloned().unwrap_or_else(|| format!("id-{id:04x}")));
                        (label.clone(), (arrival >= tsc).then(|| ((arrival - tsc) as f64 * self.ns_per_tick) as u64))
                    }
                    None if frame.len() >= 12 => (mac_text(frame[6..12].try_into().expect("6 bytes")), None),
                    None => ("runt".to_string(), None),
                };
                let tally = self.interval.entry((i, source)).or_default();
                tally.packets += 1;
                tally.bytes += u64::from(m.pkt_len());
                tally.out_of_order += u64::from(reordered);
                if let Some(l) = latency {
                    tally.latency.record(l);
                }
            }
            self.rx.clear();
            n
        }
    }

    /// Reports the interval that ends at `t_secs` and starts the next one.
    pub fn end_interval(
        &mut self,
        t_secs: f64,
        interval_secs: f64,
        pool: &Mempool,
        mut report: impl FnMut(&SinkRecord),
    ) {
        for ((i, source), tally) in std::mem::take(&mut self.interval) {
            report(&SinkRecord {
                t_secs,
                sink: self.vms[i].name.clone(),
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
            self.add_to_total(i, source, &tally);
        }
        for vm in self.vms {
            announce(pool, vm);
        }
    }

    fn add_to_total(&mut self, i: usize, source: String, tally: &Tally) {
        let t = self.total.entry((i, source)).or_default();
        t.packets += tally.packets;
        t.bytes += tally.bytes;
        t.latency.merge(&tally.latency);
        t.out_of_order += tally.out_of_order;
    }

    /// The run's totals per (sink, source), including a last partial interval.
    pub fn totals(mut self) -> Vec<SinkTotal> {
        for ((i, source), tally) in std::mem::take(&mut self.interval) {
            self.add_to_total(i, source, &tally);
        }
        self.total
            .into_iter()
            .map(|((i, source), t)| SinkTotal {
                sink: self.vms[i].name.clone(),
                source,
                packets: t.packets,
                bytes: t.bytes,
                lat_p50_us: us(t.latency.quantile_ns(0.5)),
                lat_p99_us: us(t.latency.quantile_ns(0.99)),
                lat_max_us: us((t.latency.count() > 0).then(|| t.latency.max_ns())),
                out_of_order: t.out_of_order,
            })
            .collect()
    }
}

/// Receives for as long as `run_for` says, reporting per (sink, source) each interval; returns
/// the totals.
pub fn run(
    vms: &[SinkVm],
    sources: &[String],
    pool: &Mempool,
    tsc_hz: u64,
    run_for: RunFor<'_>,
    interval_secs: f64,
    mut report: impl FnMut(&SinkRecord),
) -> Vec<SinkTotal> {
    let mut sink = Sink::new(vms, sources, pool, tsc_hz);
    let start = rdtsc();
    let hz = tsc_hz as f64;
    let mut next_report = interval_secs;
    loop {
        let t = (rdtsc() - start) as f64 / hz;
        if run_for.over(t) {
            break;
        }
        sink.poll();
        if t >= next_report {
            sink.end_interval(next_report, interval_secs, pool, &mut report);
            next_report += interval_secs;
        }
    }
    sink.totals()
}
