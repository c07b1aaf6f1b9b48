//! The master at fleet scale, on one machine: many agents (the same [`Agent`] code, each with
//! its own etcd connection and lease) whose data plane is replaced by counters that grow at a
//! steady rate, a master billing them, and purchases bought while they run. It measures the
//! sustained report rate, the time from a purchase to the switch applying it, and the billing
//! lag.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{EventType, GetOptions, WatchFilterType, WatchOptions};
use serde::Serialize;

use crate::admin;
use crate::agent::{Agent, AgentSettings, LocalSwitch};
use crate::etcd::{connect, e, EtcdTls};
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
    /// TLS to etcd.
    pub tls: Option<EtcdTls>,
    /// The cluster's key prefix.
    pub prefix: String,
    /// Agents.
    pub agents: usize,
    /// VM ports per agent.
    pub vms_per_agent: usize,
    /// Seconds of steady state measured.
    pub secs: u64,
    /// Purchases bought per second while it runs.
    pub buys_per_sec: f64,
    /// How often each agent looks at its (counter) switch between etcd events. A real agent
    /// polls its own host; here thousands share two cores, so they poll less.
    pub agent_poll_ms: u64,
    /// Each agent's lease, seconds (renewed three times per its life).
    pub lease_ttl_secs: i64,
    /// Cycles each agent's reports are written together ([`AgentSettings`]).
    pub report_every_cycles: usize,
    /// Agents sharing one etcd connection (1: each its own, as hosts have).
    pub agents_per_connection: usize,
    /// Agents started a second: a fleet starting at once is a storm of its own, which etcd
    /// answers with "too many requests".
    pub agents_started_per_sec: usize,
    /// A master to run in this process, billing into its store; `None`: a master in another
    /// process serves the same etcd and prefix.
    pub master: Option<MasterSettings>,
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
    /// Whether the master ran in this process (else in its own).
    pub master_in_process: bool,
    /// Seconds until every agent held its lease.
    pub startup_secs: f64,
    /// Hosts alive at the end.
    pub hosts_alive_at_end: usize,
    /// The steady state measured, seconds.
    pub measured_secs: f64,
    /// Reports billed (removed from etcd once their records were committed) per second: keys
    /// removed times the cycles each key holds.
    pub reports_per_sec: f64,
    /// Records the master wrote per second (known with the master in this process).
    pub records_per_sec: Option<f64>,
    /// Reports agents sent per second (one per agent per cycle is the offered load).
    pub offered_reports_per_sec: f64,
    /// Cycles each agent wrote together.
    pub report_every_cycles: usize,
    /// Each agent's lease, seconds.
    pub lease_ttl_secs: i64,
    /// Agents sharing one etcd connection.
    pub agents_per_connection: usize,
    /// Reports still waiting in etcd at the end.
    pub reports_waiting_at_end: usize,
    /// From the cycle boundary at which a key's first report was read to the key billed and
    /// removed (with several cycles a key, their wait included).
    pub billing_lag: Percentiles,
    /// From a purchase requested to its host's switch applying it (admission included).
    pub purchase_to_enforcement: Percentiles,
    /// Of it, from the request to the master's answer (admission and placement).
    pub purchase_to_answer: Percentiles,
    /// Purchases bought, and of them applied.
    pub purchases: usize,
    /// Applied.
    pub purchases_applied: usize,
}

/// Reports removed from etcd, as a watch sees them: (when, milliseconds after the cycle
/// boundary at which the agent read its counters). A report is named by the next boundary
/// after its reading ([`Agent`]); the master removes it once its records are committed.
#[derive(Default)]
struct Billed {
    seen: Vec<(Instant, f64)>,
}

impl Billed {
    fn in_window(&self, from: Instant, to: Instant) -> impl Iterator<Item = f64> + '_ {
        self.seen.iter().filter(move |(t, _)| *t >= from && *t < to).map(|(_, lag)| *lag)
    }
}

/// Watches the usage reports' removals until `stop`.
async fn watch_billed(
    mut client: etcd_client::Client,
    keys: Keys,
    cycle_ms: u64,
    billed: Arc<Mutex<Billed>>,
    stop: Arc<AtomicBool>,
) -> Result<(), ClusterError> {
    let opts = WatchOptions::new().with_prefix().with_filters([WatchFilterType::NoPut]);
    let mut stream = client.watch(keys.usage(), Some(opts)).await.map_err(e)?;
    while !stop.load(Ordering::SeqCst) {
        let Ok(msg) = tokio::time::timeout(Duration::from_millis(200), stream.message()).await else { continue };
        let Some(msg) = msg.map_err(e)? else { break };
        let (now, now_ms) = (Instant::now(), unix_ns() as f64 / 1e6);
        let mut b = billed.lock().expect("billed");
        for ev in msg.events().iter().filter(|ev| ev.event_type() == EventType::Delete) {
            let key = ev.kv().and_then(|kv| kv.key_str().ok()).unwrap_or_default();
            let cycle = key.rsplit('/').next().and_then(|c| c.parse::<f64>().ok()).unwrap_or(0.0);
            b.seen.push((now, now_ms - (cycle - 1.0) * cycle_ms as f64));
        }
    }
    Ok(())
}

/// Runs the experiment: agents and buyer in this process (one tokio runtime), the master here
/// too or in its own process.
pub async fn run(s: ScaleSettings, progress: impl Fn(&str)) -> Result<ScaleResult, ClusterError> {
    let keys = Keys::new(&s.prefix);
    let stop = Arc::new(AtomicBool::new(false));
    let mut client = connect(&s.endpoints, s.tls.as_ref()).await?;
    let (master_task, stats) = match &s.master {
        Some(settings) => {
            let master = Master::new(settings.clone())?;
            let stats = master.stats.clone();
            (Some(tokio::spawn(master.serve(stop.clone()))), Some(stats))
        }
        None => (None, None),
    };
    let billed = Arc::new(Mutex::new(Billed::default()));
    let cycle_ms = AgentSettings::new(Vec::new(), String::new()).cycle_ms;
    let watcher = tokio::spawn(watch_billed(client.clone(), keys.clone(), cycle_ms, billed.clone(), stop.clone()));
    let agents = start_agents(&s, &stop).await?;
    let startup_secs = wait_for_leases(&mut client, &keys, &s, &stop, &progress).await?;
    let records_before = stats.as_ref().map(|st| st.lock().expect("stats").records);
    let measure = Instant::now();
    let bought = buy_while_running(&mut client, &keys, &s, &billed, &progress).await?;
    let (measured_secs, measured_until) = (measure.elapsed().as_secs_f64(), Instant::now());
    let records_after = stats.as_ref().map(|st| st.lock().expect("stats").records);
    // Let the last purchases land before reading the answers.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (latencies, answers) = enforcement_latencies(&mut client, &keys, &bought).await?;
    let hosts_alive_at_end = alive_hosts(&mut client, &keys).await?;
    let waiting =
        client.get(keys.usage(), Some(GetOptions::new().with_prefix().with_count_only())).await.map_err(e)?.count()
            as usize;
    stop.store(true, Ordering::SeqCst);
    for a in agents {
        let _ = a.await;
    }
    if let Some(m) = master_task {
        let _ = m.await;
    }
    let _ = watcher.await;
    let lag: Vec<f64> = billed.lock().expect("billed").in_window(measure, measured_until).collect();
    Ok(ScaleResult {
        agents: s.agents,
        vms: s.agents * s.vms_per_agent,
        master_in_process: s.master.is_some(),
        startup_secs,
        hosts_alive_at_end,
        measured_secs,
        reports_per_sec: (lag.len() * s.report_every_cycles) as f64 / measured_secs,
        records_per_sec: records_before.zip(records_after).map(|(b, a)| (a - b) as f64 / measured_secs),
        offered_reports_per_sec: s.agents as f64 * 1000.0 / cycle_ms as f64,
        report_every_cycles: s.report_every_cycles,
        lease_ttl_secs: s.lease_ttl_secs,
        agents_per_connection: s.agents_per_connection,
        reports_waiting_at_end: waiting,
        billing_lag: percentiles(lag),
        purchases: bought.len(),
        purchases_applied: latencies.len(),
        purchase_to_enforcement: percentiles(latencies),
        purchase_to_answer: percentiles(answers),
    })
}

/// Every agent, each with its own lease, over `agents_per_connection` connections each,
/// started at the rate asked.
async fn start_agents(
    s: &ScaleSettings,
    stop: &Arc<AtomicBool>,
) -> Result<Vec<tokio::task::JoinHandle<()>>, ClusterError> {
    let mut agents = Vec::new();
    let mut shared = None;
    for i in 0..s.agents {
        let host = format!("sim{i:05}");
        let vms = (0..s.vms_per_agent).map(|j| format!("s{i:05}v{j}")).collect();
        let mut settings = AgentSettings::new(s.endpoints.clone(), host);
        settings.tls = s.tls.clone();
        settings.prefix = s.prefix.clone();
        settings.poll_ms = s.agent_poll_ms;
        settings.report_every_cycles = s.report_every_cycles;
        settings.lease_ttl_secs = s.lease_ttl_secs;
        let mut agent = Agent::new(settings, Arc::new(CounterSwitch::new(vms, 10_000_000)));
        if s.agents_per_connection > 1 {
            if i % s.agents_per_connection == 0 {
                shared = Some(connect(&s.endpoints, s.tls.as_ref()).await?);
            }
            agent = agent.with_client(shared.clone().expect("made above"));
        }
        agents.push(tokio::spawn(agent.run(stop.clone())));
        // Ten steps a second.
        let step = (s.agents_started_per_sec / 10).max(1);
        if i % step == step - 1 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(agents)
}

/// Hosts holding their lease: their `alive` keys, read without values (a fleet's host keys are
/// tens of thousands).
async fn alive_hosts(client: &mut etcd_client::Client, keys: &Keys) -> Result<usize, ClusterError> {
    let got = client.get(keys.hosts(), Some(GetOptions::new().with_prefix().with_keys_only())).await.map_err(e)?;
    Ok(got
        .kvs()
        .iter()
        .filter(|kv| kv.key_str().is_ok_and(|k| keys.parse_host_key(k).is_some_and(|(_, kind, _)| kind == "alive")))
        .count())
}

/// Seconds until every agent holds its lease (two minutes at most).
async fn wait_for_leases(
    client: &mut etcd_client::Client,
    keys: &Keys,
    s: &ScaleSettings,
    stop: &AtomicBool,
    progress: &impl Fn(&str),
) -> Result<f64, ClusterError> {
    let started = Instant::now();
    loop {
        let n = alive_hosts(client, keys).await?;
        progress(&format!("{n} of {} agents hold their lease", s.agents));
        if n == s.agents {
            return Ok(started.elapsed().as_secs_f64());
        }
        if started.elapsed() > Duration::from_secs(180) {
            stop.store(true, Ordering::SeqCst);
            return Err(ClusterError::AgentsDown { up: n, agents: s.agents });
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Buys `buys_per_sec` purchases on average (each asked of the master and answered) for `secs`.
async fn buy_while_running(
    client: &mut etcd_client::Client,
    keys: &Keys,
    s: &ScaleSettings,
    billed: &Mutex<Billed>,
    progress: &impl Fn(&str),
) -> Result<Vec<Purchase>, ClusterError> {
    use rand::{Rng, SeedableRng};
    let measure = Instant::now();
    let mut bought = Vec::new();
    // Purchases arrive as a Poisson process, as independent buyers do: at a fixed period they
    // would keep one phase against the fleet's per-second reports, and the figure would
    // depend on that phase.
    let mut arrivals = rand::rngs::StdRng::seed_from_u64(s.agents as u64);
    let mut gap = || Duration::from_secs_f64(-(1.0 - arrivals.random::<f64>()).ln() / s.buys_per_sec.max(0.01));
    let mut next_buy = Instant::now() + gap();
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
            let _ = admin::release(client, keys, &p.vm).await;
            admin::buy(client, keys, p.clone()).await?;
            bought.push(p);
            next_buy += gap();
        }
        if last_print.elapsed() > Duration::from_secs(5) {
            let billed = billed.lock().expect("billed").in_window(measure, Instant::now()).count();
            progress(&format!(
                "{:.0} s: {billed} reports billed, {} bought",
                measure.elapsed().as_secs_f64(),
                bought.len()
            ));
            last_print = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(bought)
}

/// Per purchase applied, milliseconds from its request to its switch applying it, and to the
/// master's answer.
async fn enforcement_latencies(
    client: &mut etcd_client::Client,
    keys: &Keys,
    bought: &[Purchase],
) -> Result<(Vec<f64>, Vec<f64>), ClusterError> {
    let (mut applied, mut answered) = (Vec::new(), Vec::new());
    for p in bought {
        let got = client.get(keys.status(p.host.as_deref().expect("host"), &p.vm), None).await.map_err(e)?;
        let Some(st) = got.kvs().first().and_then(|kv| serde_json::from_slice::<Status>(kv.value()).ok()) else {
            continue;
        };
        if st.state != EnforcementState::Applied {
            continue;
        }
        applied.push(st.answered_unix_ns.saturating_sub(st.issued_unix_ns) as f64 / 1e6);
        let got = client.get(keys.vm(&p.vm), None).await.map_err(e)?;
        let held = got.kvs().first().and_then(|kv| serde_json::from_slice::<Purchase>(kv.value()).ok());
        if let Some(a) = held.and_then(|h| h.admission) {
            answered.push(a.answered_unix_ns.saturating_sub(st.issued_unix_ns) as f64 / 1e6);
        }
    }
    Ok((applied, answered))
}
