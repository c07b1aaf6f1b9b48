//! The agent in every switch (seed 003 Sec. 4.1, Fig. 4): it watches what the master wants its
//! host to enforce, applies it to the switch (which admits or refuses it whole), answers in
//! etcd, announces the VM ports it has, keeps a lease so the master sees it alive, and reports
//! every billing cycle what each VM sent.
//!
//! etcd going away changes nothing in the switch: it keeps enforcing what it last applied, the
//! agent keeps measuring cycles into a bounded queue, and on reconnection it re-announces
//! itself, catches up with what changed, and sends the queued reports.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, EventType, PutOptions, WatchOptions};

use crate::etcd::{connect, e, get_prefix, EtcdTls};
use crate::keys::Keys;
use crate::purchase::{release_options, unix_ns, Enforcement, EnforcementState, HostInfo, Status};
use crate::usage::{Deltas, UsageReport, VmCounters};
use crate::FleetError;

/// What the agent needs of a switch. The data plane implements it over the daemon; the scale
/// simulation implements it with counters.
pub trait LocalSwitch: Send + Sync + 'static {
    /// The ports that are VMs (not uplinks).
    fn vm_ports(&self) -> Vec<String>;
    /// Sets `options` on port `vm`, exactly as `slaswitch set-port` does: whole or not at all.
    fn apply(&self, vm: &str, options: &BTreeMap<String, String>) -> Result<(), String>;
    /// Every VM's cumulative counters.
    fn counters(&self) -> Vec<VmCounters>;
    /// The line rate of the host's uplink, wire bits/s, if it has one.
    fn uplink_bps(&self) -> Option<u64> {
        None
    }
    /// Lets purchased bandwidth add up to `ratio` times the uplink's rate (the over-commitment
    /// the master granted this host).
    fn set_link_overcommit(&self, _ratio: f64) -> Result<(), String> {
        Ok(())
    }
}

/// How an agent runs.
#[derive(Clone, Debug)]
pub struct AgentSettings {
    /// etcd's client URLs.
    pub endpoints: Vec<String>,
    /// TLS to etcd, if it serves `https://`.
    pub tls: Option<EtcdTls>,
    /// This host's id.
    pub host: String,
    /// The cluster's key prefix.
    pub prefix: String,
    /// The lease's time to live: a host silent this long is dead to the master.
    pub lease_ttl_secs: i64,
    /// The billing cycle (seed 003 Sec. 3.3: per second).
    pub cycle_ms: u64,
    /// Reports kept while etcd cannot be reached; older ones are dropped first.
    pub max_pending_reports: usize,
    /// Cycles whose reports are written together, under one key: 1 writes each at the end of
    /// its cycle; more trades billing lag for fewer etcd writes in a large fleet. Every cycle
    /// is still billed on its own.
    pub report_every_cycles: usize,
    /// How often the local switch is looked at between etcd events (new or removed ports,
    /// enforcements to retry); the end of every cycle wakes the agent anyway.
    pub poll_ms: u64,
}

impl AgentSettings {
    /// Defaults: 5 s lease, 1 s cycle, an hour of reports kept offline.
    pub fn new(endpoints: Vec<String>, host: String) -> AgentSettings {
        AgentSettings {
            endpoints,
            tls: None,
            host,
            prefix: crate::keys::DEFAULT_PREFIX.into(),
            lease_ttl_secs: 5,
            cycle_ms: 1000,
            max_pending_reports: 3600,
            poll_ms: 50,
            report_every_cycles: 1,
        }
    }
}

struct Wanted {
    revision: i64,
    enforcement: Enforcement,
}

struct Applied {
    revision: i64,
    /// The options in force on the port (a refusal keeps the previous ones).
    options: BTreeMap<String, String>,
}

/// One host's agent.
pub struct Agent<S: LocalSwitch> {
    settings: AgentSettings,
    keys: Keys,
    switch: Arc<S>,
    wanted: BTreeMap<String, Wanted>,
    applied: BTreeMap<String, Applied>,
    statuses: BTreeMap<String, Status>,
    /// Statuses to write (`None`: delete).
    dirty: BTreeMap<String, Option<Status>>,
    ports: BTreeSet<String>,
    announced: BTreeSet<String>,
    deltas: Deltas,
    pending: VecDeque<UsageReport>,
    last_sample: Instant,
    next_cycle_ms: u64,
    last_cycle: u64,
    /// Reports dropped because etcd was away too long.
    pub dropped_reports: u64,
    /// The over-commitment last set on the uplink.
    link_overcommit: Option<f64>,
    /// A connection shared with other agents, instead of one of its own.
    shared: Option<Client>,
    /// When the current session's lease and watch were set up.
    connected_since: Option<Instant>,
}

/// The wait before reconnecting after a first failure; it doubles with each failure after.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// The longest wait before reconnecting.
const MAX_BACKOFF: Duration = Duration::from_secs(3);

/// The wait before reconnecting, from the wait before the last reconnection: the first, or
/// the first after a healthy session, is the shortest; each failure after that doubles it.
fn reconnect_wait(previous: Option<Duration>, healthy: bool) -> Duration {
    match previous {
        Some(wait) if !healthy => (wait * 2).min(MAX_BACKOFF),
        _ => FIRST_BACKOFF,
    }
}

/// A number in [0, 1) that differs between hosts and between calls.
fn jitter(host: &str) -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write(host.as_bytes());
    h.write_u64(unix_ns());
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

fn unix_ms() -> u64 {
    unix_ns() / 1_000_000
}

impl<S: LocalSwitch> Agent<S> {
    /// An agent for `switch`.
    pub fn new(settings: AgentSettings, switch: Arc<S>) -> Agent<S> {
        let keys = Keys::new(&settings.prefix);
        let next_cycle_ms = (unix_ms() / settings.cycle_ms + 1) * settings.cycle_ms;
        Agent {
            settings,
            keys,
            switch,
            wanted: BTreeMap::new(),
            applied: BTreeMap::new(),
            statuses: BTreeMap::new(),
            dirty: BTreeMap::new(),
            ports: BTreeSet::new(),
            announced: BTreeSet::new(),
            deltas: Deltas::default(),
            pending: VecDeque::new(),
            last_sample: Instant::now(),
            next_cycle_ms,
            last_cycle: 0,
            dropped_reports: 0,
            link_overcommit: None,
            shared: None,
            connected_since: None,
        }
    }

    /// Speaks to etcd over `client`, shared with other agents (its lease, watch and keys stay
    /// its own): how one process plays a fleet without a connection per host.
    pub fn with_client(mut self, client: Client) -> Agent<S> {
        self.shared = Some(client);
        self
    }

    /// Runs until `stop`; then reports the last partial cycle and gives its lease back, so the
    /// master sees the host leave at once.
    pub async fn run(mut self, stop: Arc<AtomicBool>) {
        let mut backoff = None;
        while !stop.load(Ordering::SeqCst) {
            match self.session(&stop).await {
                Ok(()) => return,
                Err(err) => tracing::warn!(
                    "agent {}: etcd: {err}; enforcing what was last applied, {} reports queued",
                    self.settings.host,
                    self.pending.len()
                ),
            }
            // A session that held its lease a whole lease life was healthy: this failure is a
            // new one and waits the shortest time, not the longest an old outage reached.
            let lease_life = Duration::from_secs(self.settings.lease_ttl_secs.max(1) as u64);
            let healthy = self.connected_since.take().is_some_and(|since| since.elapsed() >= lease_life);
            let wait = reconnect_wait(backoff, healthy);
            backoff = Some(wait);
            // Hosts that lost etcd together must not come back together: half to one and a
            // half times the backoff, drawn from the host's name and the clock.
            let until = Instant::now() + wait.mul_f64(0.5 + jitter(&self.settings.host));
            while Instant::now() < until && !stop.load(Ordering::SeqCst) {
                self.step();
                tokio::time::sleep(self.until_next_step()).await;
            }
        }
    }

    /// One connection to etcd, until it fails or `stop`.
    async fn session(&mut self, stop: &AtomicBool) -> Result<(), FleetError> {
        let mut client = match &self.shared {
            Some(c) => c.clone(),
            None => connect(&self.settings.endpoints, self.settings.tls.as_ref()).await?,
        };
        let lease = client.lease_grant(self.settings.lease_ttl_secs, None).await.map_err(e)?.id();
        let (mut keeper, mut alive_stream) = client.lease_keep_alive(lease).await.map_err(e)?;
        let mut info = HostInfo {
            host: self.settings.host.clone(),
            cycle_ms: self.settings.cycle_ms,
            since_unix_ms: unix_ms(),
            uplink_bps: self.switch.uplink_bps(),
        };
        let leased = || Some(PutOptions::new().with_lease(lease));
        client.put(self.keys.alive(&self.settings.host), json(&info), leased()).await.map_err(e)?;
        let prefix = self.keys.guarantees(&self.settings.host);
        let (revision, kvs) = get_prefix(&mut client, &prefix, true).await?;
        self.wanted.clear();
        for kv in &kvs {
            self.want(kv.key_str().map_err(e)?, kv.value(), kv.mod_revision());
        }
        // Keys under the old lease may be gone: write them again.
        self.announced.clear();
        self.dirty.extend(self.statuses.iter().map(|(vm, s)| (vm.clone(), Some(s.clone()))));
        let opts = WatchOptions::new().with_prefix().with_start_revision(revision + 1);
        let mut watch = client.watch(prefix.as_str(), Some(opts)).await.map_err(e)?;
        tracing::info!("agent {}: connected to etcd, lease {lease:x}", self.settings.host);
        self.connected_since = Some(Instant::now());
        let renew_every = Duration::from_millis((self.settings.lease_ttl_secs as u64 * 1000 / 3).max(100));
        let lease_life = Duration::from_secs(self.settings.lease_ttl_secs as u64);
        let (mut renewed, mut last_alive) = (Instant::now(), Instant::now());
        let mut writing: Option<(writes::Write, writes::Flush)> = None;
        loop {
            if stop.load(Ordering::SeqCst) {
                if let Some((write, flush)) = writing.take() {
                    let result = write.await;
                    self.finish_flush(flush, result)?;
                }
                self.sample(true);
                self.flush(&client, lease, true).await?;
                let _ = client.lease_revoke(lease).await;
                return Ok(());
            }
            tokio::select! {
                msg = watch.message() => {
                    let msg = msg.map_err(e)?.ok_or(FleetError::WatchEnded)?;
                    if msg.canceled() {
                        return Err(FleetError::WatchCancelled(msg.cancel_reason().to_string()));
                    }
                    for ev in msg.events() {
                        let Some(kv) = ev.kv() else { continue };
                        let key = kv.key_str().map_err(e)?;
                        match ev.event_type() {
                            EventType::Put => self.want(key, kv.value(), kv.mod_revision()),
                            EventType::Delete => {
                                if let Some(vm) = key.strip_prefix(prefix.as_str()) {
                                    self.wanted.remove(vm);
                                }
                            }
                        }
                    }
                }
                alive = alive_stream.message() => {
                    if alive.map_err(e)?.map_or(0, |r| r.ttl()) <= 0 {
                        return Err(FleetError::LeaseExpired);
                    }
                    last_alive = Instant::now();
                }
                result = async { (&mut writing.as_mut().expect("guarded").0).await }, if writing.is_some() => {
                    let (_, flush) = writing.take().expect("guarded");
                    self.finish_flush(flush, result)?;
                }
                _ = tokio::time::sleep(self.until_next_step()) => {}
            }
            if renewed.elapsed() >= renew_every {
                // Renewals are answered beside the loop; a lease's life without an answer is
                // a lease lost.
                if last_alive.elapsed() > lease_life {
                    return Err(FleetError::LeaseExpired);
                }
                keeper.keep_alive().await.map_err(e)?;
                renewed = Instant::now();
                // The uplink may have been added, removed or changed since: announce its rate.
                let uplink_bps = self.switch.uplink_bps();
                if uplink_bps != info.uplink_bps {
                    info.uplink_bps = uplink_bps;
                    client.put(self.keys.alive(&self.settings.host), json(&info), leased()).await.map_err(e)?;
                }
            }
            self.step();
            if writing.is_none() {
                writing = self.start_flush(&client, lease, false);
            }
        }
    }

    /// Until the next poll of the switch, or the end of the cycle if that comes first.
    fn until_next_step(&self) -> Duration {
        let to_cycle_end_ms = self.next_cycle_ms.saturating_sub(unix_ms());
        Duration::from_millis(self.settings.poll_ms.min(to_cycle_end_ms).max(1))
    }

    /// Records what the master wants for the VM of `key`.
    fn want(&mut self, key: &str, value: &[u8], revision: i64) {
        let Some(vm) = key.strip_prefix(self.keys.guarantees(&self.settings.host).as_str()) else { return };
        match serde_json::from_slice::<Enforcement>(value) {
            Ok(enforcement) => {
                self.wanted.insert(vm.to_string(), Wanted { revision, enforcement });
            }
            Err(err) => {
                self.wanted.remove(vm);
                let reason = format!("the enforcement at {key} is not readable: {err}");
                self.answer(vm, EnforcementState::Refused, Some(reason), revision, 0);
            }
        }
    }

    fn answer(
        &mut self,
        vm: &str,
        state: EnforcementState,
        reason: Option<String>,
        revision: i64,
        issued_unix_ns: u64,
    ) {
        let same =
            self.statuses.get(vm).is_some_and(|s| s.state == state && s.revision == revision && s.reason == reason);
        if same {
            return;
        }
        let status = Status { state, reason, revision, issued_unix_ns, answered_unix_ns: unix_ns() };
        self.statuses.insert(vm.to_string(), status.clone());
        self.dirty.insert(vm.to_string(), Some(status));
    }

    /// Everything local: ports, enforcement, the billing cycle. Runs with or without etcd.
    pub fn step(&mut self) {
        self.ports = self.switch.vm_ports().into_iter().collect();
        // A port that went away takes what was applied to it: a new port of that name starts
        // from its own options.
        let ports = &self.ports;
        self.applied.retain(|vm, _| ports.contains(vm));
        self.grant_overcommit();
        let mut todo = Vec::new();
        for (vm, w) in &self.wanted {
            if self.applied.get(vm).is_some_and(|a| a.revision == w.revision) {
                continue;
            }
            todo.push((vm.clone(), w.revision, w.enforcement.options.clone(), w.enforcement.issued_unix_ns));
        }
        for (vm, revision, options, issued) in todo {
            if !self.ports.contains(&vm) {
                self.answer(
                    &vm,
                    EnforcementState::Waiting,
                    Some("no port of this name on the host yet".into()),
                    revision,
                    issued,
                );
                continue;
            }
            match self.switch.apply(&vm, &options) {
                Ok(()) => {
                    self.applied.insert(vm.clone(), Applied { revision, options });
                    self.answer(&vm, EnforcementState::Applied, None, revision, issued);
                }
                Err(reason) => {
                    let before = self.applied.get(&vm).map(|a| a.options.clone()).unwrap_or_default();
                    self.applied.insert(vm.clone(), Applied { revision, options: before });
                    self.answer(&vm, EnforcementState::Refused, Some(reason), revision, issued);
                }
            }
        }
        self.release_unwanted();
        self.sample(false);
    }

    /// Sets on the uplink the largest over-commitment any wanted enforcement carries (each
    /// carries what the master granted the host when it was admitted), before the purchases
    /// that need it; back to 1 once none carries one.
    fn grant_overcommit(&mut self) {
        let granted = self.wanted.values().filter_map(|w| w.enforcement.link_overcommit).reduce(f64::max);
        let want = match (granted, self.link_overcommit) {
            (Some(r), _) => r.max(1.0),
            (None, Some(_)) => 1.0,
            (None, None) => return,
        };
        if self.link_overcommit == Some(want) {
            return;
        }
        match self.switch.set_link_overcommit(want) {
            Ok(()) => self.link_overcommit = Some(want),
            Err(err) => tracing::warn!("agent {}: link_overcommit={want}: {err}", self.settings.host),
        }
    }

    /// Purchases that were released: their options go back to the switch's defaults.
    fn release_unwanted(&mut self) {
        let released: Vec<String> = self.applied.keys().filter(|vm| !self.wanted.contains_key(*vm)).cloned().collect();
        for vm in released {
            let applied = self.applied.remove(&vm).expect("listed");
            let reset = release_options(&applied.options);
            if !reset.is_empty() {
                if let Err(err) = self.switch.apply(&vm, &reset) {
                    tracing::warn!("agent {}: releasing {vm}: {err}", self.settings.host);
                }
            }
        }
        let gone: Vec<String> = self.statuses.keys().filter(|vm| !self.wanted.contains_key(*vm)).cloned().collect();
        for vm in gone {
            self.statuses.remove(&vm);
            self.dirty.insert(vm, None);
        }
    }

    /// At the end of every cycle (or at once with `last`), what each VM sent since the last.
    fn sample(&mut self, last: bool) {
        let now_ms = unix_ms();
        if now_ms < self.next_cycle_ms && !last {
            return;
        }
        let cycle_ms = self.settings.cycle_ms;
        // A cycle is named by its end, rounded up (a partial last cycle is the one it is in),
        // and never twice: a record per VM per cycle is the billing store's key.
        let cycle = now_ms.div_ceil(cycle_ms).max(self.last_cycle + 1);
        self.last_cycle = cycle;
        let vms = self.deltas.take(&self.switch.counters());
        let secs = self.last_sample.elapsed().as_secs_f64();
        self.last_sample = Instant::now();
        self.next_cycle_ms = (now_ms / cycle_ms + 1) * cycle_ms;
        if vms.is_empty() {
            return;
        }
        self.pending.push_back(UsageReport {
            host: self.settings.host.clone(),
            cycle,
            cycle_ms,
            secs,
            read_unix_ms: now_ms,
            vms,
        });
        while self.pending.len() > self.settings.max_pending_reports {
            self.pending.pop_front();
            self.dropped_reports += 1;
        }
    }
}

mod writes;

fn json(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).expect("cluster values serialise")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_waits_double_to_the_cap_and_start_over_after_a_healthy_session() {
        let mut wait = None;
        let mut waits = Vec::new();
        for _ in 0..6 {
            wait = Some(reconnect_wait(wait, false));
            waits.push(wait.unwrap().as_millis());
        }
        assert_eq!(waits, [200, 400, 800, 1600, 3000, 3000]);
        assert_eq!(reconnect_wait(wait, true), FIRST_BACKOFF);
    }
}
