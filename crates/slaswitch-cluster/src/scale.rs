//! The master at fleet scale, on one machine: many agents (the same [`Agent`] code, each with
//! its own etcd connection and lease) whose data plane is replaced by counters that grow at a
//! steady rate, a master billing them, and purchases bought while they run. It measures the
//! sustained report rate, the time from a purchase to the switch applying it, and the billing
//! lag.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::admin;
use crate::agent::{Agent, AgentSettings, LocalSwitch};
use crate::etcd::{connect, e};
use crate::keys::Keys;
use crate::master::{Master, MasterSettings};
use slaswitch_qos::egress::softbw::Guarantee;

use crate::purchase::{unix_ns, EnforcementState, Purchase, Status};
use crate::usage::VmCounters;
use crate::ClusterError;

/// A switch that is only counters: each VM sends `rate_bps` from its creation.
pub struct CounterSwitch {
    vms: Vec<String>,
    rate_bps: u64,
    started: Instant,
    applied: Mutex<BTreeMap<String, BTreeMap<String, String>>>,
}

impl CounterSwitch {
    /// `vms` each sending `rate_bps`.
    pub fn new(vms: Vec<String>, rate_bps: u64) -> CounterSwitch {
        CounterSwitch { vms, rate_bps, started: Instant::now(), applied: Mutex::default() }
    }
}

impl LocalSwitch for CounterSwitch {
    fn vm_ports(&self) -> Vec<String> {
        self.vms.clone()
    }
    fn apply(&self, vm: &str, options: &BTreeMap<String, String>) -> Result<(), String> {
        let mut a = self.applied.lock().expect("applied");
        a.entry(vm.to_string()).or_default().extend(options.clone());
        Ok(())
    }
    fn counters(&self) -> Vec<VmCounters> {
        let bytes = (self.started.elapsed().as_secs_f64() * self.rate_bps as f64 / 8.0) as u64;
        self.vms.iter().map(|vm| VmCounters { vm: vm.clone(), sent_bytes: bytes, guarantee_bps: 0 }).collect()
    }
}

/// The experiment's settings.
#[derive(Clone, Debug)]
pub struct ScaleSettings {
    /// etcd.
    pub endpoints: Vec<String>,
    /// Agents.
    pub agents: usize,
    /// VM ports per agent.
    pub vms_per_agent: usize,
    /// Seconds of steady state measured.
    pub secs: u64,
    /// Purchases bought per second while it runs.
    pub buys_per_sec: f64,
    /// The master, billing into its store.
    pub master: MasterSettings,
}

/// Percentiles of a sample, milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Percentiles {
    /// How many.
    pub count: usize,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

/// The percentiles of `ms`.
pub fn percentiles(mut ms: Vec<f64>) -> Percentiles {
    if ms.is_empty() {
        return Percentiles::default();
    }
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    Percentiles { count: ms.len(), p50_ms: at(0.5), p99_ms: at(0.99), max_ms: *ms.last().expect("not empty") }
}

/// What it measured.
#[derive(Clone, Debug, Serialize)]
pub struct ScaleResult {
    /// Agents started.
    pub agents: usize,
    /// VMs in all.
    pub vms: usize,
    /// Seconds until every agent held its lease.
    pub startup_secs: f64,
    /// Hosts alive at the end.
    pub hosts_alive_at_end: usize,
    /// The steady state measured, seconds.
    pub measured_secs: f64,
    /// Reports billed per second over it.
    pub reports_per_sec: f64,
    /// Records written per second.
    pub records_per_sec: f64,
    /// Reports agents sent per second (one per agent per cycle is the offered load).
    pub offered_reports_per_sec: f64,
    /// Reports still waiting in etcd at the end.
    pub reports_waiting_at_end: usize,
    /// From a report's counters read to its records committed.
    pub billing_lag: Percentiles,
    /// From a purchase written to its host's switch applying it.
    pub purchase_to_enforcement: Percentiles,
    /// Purchases bought, and of them applied.
    pub purchases: usize,
    /// Applied.
    pub purchases_applied: usize,
}

/// Runs the experiment in this process (agents, master, buyer on one tokio runtime).
pub async fn run(s: ScaleSettings, progress: impl Fn(&str)) -> Result<ScaleResult, ClusterError> {
    let keys = Keys::new(&s.master.prefix);
    let stop = Arc::new(AtomicBool::new(false));
    let master = Master::new(s.master.clone())?;
    let stats = master.stats.clone();
    let master_task = tokio::spawn(master.serve(stop.clone()));
    let started = Instant::now();
    let mut agents = Vec::new();
    for i in 0..s.agents {
        let host = format!("sim{i:05}");
        let vms = (0..s.vms_per_agent).map(|j| format!("s{i:05}v{j}")).collect();
        let mut settings = AgentSettings::new(s.endpoints.clone(), host);
        settings.tls = s.master.tls.clone();
        settings.prefix = s.master.prefix.clone();
        let agent = Agent::new(settings, Arc::new(CounterSwitch::new(vms, 10_000_000)));
        agents.push(tokio::spawn(agent.run(stop.clone())));
        if i % 100 == 99 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let mut client = connect(&s.endpoints, s.master.tls.as_ref()).await?;
    let alive = |client: &mut etcd_client::Client| {
        let keys = keys.clone();
        let mut client = client.clone();
        async move { admin::hosts(&mut client, &keys).await.map(|h| h.iter().filter(|h| h.alive).count()) }
    };
    loop {
        let n = alive(&mut client).await?;
        progress(&format!("{n} of {} agents hold their lease", s.agents));
        if n == s.agents {
            break;
        }
        if started.elapsed() > Duration::from_secs(120) {
            stop.store(true, Ordering::SeqCst);
            return Err(ClusterError::AgentsDown { up: n, agents: s.agents });
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let startup_secs = started.elapsed().as_secs_f64();
    let before = stats.lock().expect("stats").clone();
    let measure = Instant::now();
    let mut bought = Vec::new();
    let gap = Duration::from_secs_f64(1.0 / s.buys_per_sec.max(0.01));
    let mut next_buy = Instant::now();
    let mut last_print = Instant::now();
    while measure.elapsed() < Duration::from_secs(s.secs) {
        if Instant::now() >= next_buy && s.buys_per_sec > 0.0 {
            let n = bought.len();
            let (agent, vm) = ((n * 7919) % s.agents, n % s.vms_per_agent);
            let p = Purchase {
                vm: format!("s{agent:05}v{vm}"),
                tenant: format!("t{}", agent % 50),
                host: Some(format!("sim{agent:05}")),
                guarantee: Guarantee::Strict { rate_bps: 100_000_000 },
                cycles: BTreeMap::new(),
                bought_unix_ms: unix_ns() / 1_000_000,
                admission: None,
            };
            let _ = admin::release(&mut client, &keys, &p.vm).await;
            admin::buy(&mut client, &keys, p.clone()).await?;
            bought.push(p);
            next_buy += gap;
        }
        if last_print.elapsed() > Duration::from_secs(5) {
            let st = stats.lock().expect("stats").clone();
            progress(&format!(
                "{:.0} s: {} reports billed, {} bought",
                measure.elapsed().as_secs_f64(),
                st.reports,
                bought.len()
            ));
            last_print = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let measured_secs = measure.elapsed().as_secs_f64();
    let after = stats.lock().expect("stats").clone();
    // Let the last purchases land before reading the answers.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut latencies = Vec::new();
    for p in &bought {
        let got = client.get(keys.status(p.host.as_deref().expect("host"), &p.vm), None).await.map_err(e)?;
        if let Some(st) = got.kvs().first().and_then(|kv| serde_json::from_slice::<Status>(kv.value()).ok()) {
            if st.state == EnforcementState::Applied {
                latencies.push(st.answered_unix_ns.saturating_sub(st.issued_unix_ns) as f64 / 1e6);
            }
        }
    }
    let hosts_alive_at_end = alive(&mut client).await?;
    let waiting = client
        .get(keys.usage(), Some(etcd_client::GetOptions::new().with_prefix().with_count_only()))
        .await
        .map_err(e)?
        .count() as usize;
    stop.store(true, Ordering::SeqCst);
    for a in agents {
        let _ = a.await;
    }
    let _ = master_task.await;
    let lag: Vec<f64> = after.billing_lag_ms[before.billing_lag_ms.len()..].iter().map(|&m| m as f64).collect();
    Ok(ScaleResult {
        agents: s.agents,
        vms: s.agents * s.vms_per_agent,
        startup_secs,
        hosts_alive_at_end,
        measured_secs,
        reports_per_sec: (after.reports - before.reports) as f64 / measured_secs,
        records_per_sec: (after.records - before.records) as f64 / measured_secs,
        offered_reports_per_sec: s.agents as f64,
        reports_waiting_at_end: waiting,
        billing_lag: percentiles(lag),
        purchases: bought.len(),
        purchases_applied: latencies.len(),
        purchase_to_enforcement: percentiles(latencies),
    })
}
