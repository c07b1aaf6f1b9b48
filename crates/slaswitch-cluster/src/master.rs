//! The master (seed 003 Sec. 4, Fig. 4): it keeps what each VM bought, sends each purchase to
//! the host whose port announces the VM (Sec. 4.1), bills every usage report
//! ([`crate::billing`]) and, every cycle, rewrites each dynamic guarantee as what is left of it.
//!
//! All of its state is in etcd and the billing store: a restarted master reads both and goes on
//! where it stopped. A report is deleted from etcd only once its records are committed, and the
//! store ignores a record it already has, so a restart loses and duplicates nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, EventType, Txn, TxnOp, WatchFilterType, WatchOptions, WatchResponse};
use slaswitch_qos::egress::softbw::Guarantee;
use slaswitch_qos::pricing::PriceParams;

use crate::admission::AdmissionSettings;
use crate::billing::dynamic_in_force;
use crate::etcd::{connect, e, get_prefix, EtcdTls};
use crate::keys::Keys;
use crate::purchase::{unix_ns, Enforcement, HostInfo, HostLoadView, Purchase, PurchaseRequest};
use crate::store::Store;
use crate::utilization::UtilizationBook;
use crate::ClusterError;
use slaswitch_agent::FleetError;

/// Where billing records go.
#[derive(Clone, Debug)]
pub enum StoreSpec {
    /// A SQLite file (the default).
    Sqlite(PathBuf),
    /// A PostgreSQL URL.
    Postgres(String),
}

impl StoreSpec {
    /// Opens it.
    pub fn open(&self) -> Result<Store, ClusterError> {
        match self {
            StoreSpec::Sqlite(p) => Store::open_sqlite(p),
            StoreSpec::Postgres(url) => Store::open_postgres(url),
        }
    }
}

/// How the master runs.
#[derive(Clone, Debug)]
pub struct MasterSettings {
    /// etcd's client URLs.
    pub endpoints: Vec<String>,
    /// TLS to etcd, if it serves `https://`.
    pub tls: Option<EtcdTls>,
    /// The cluster's key prefix.
    pub prefix: String,
    /// The price functions' parameters.
    pub prices: PriceParams,
    /// The billing store.
    pub store: StoreSpec,
    /// How purchases are admitted and placed.
    pub admission: AdmissionSettings,
}

/// What the master has done, for its log and the scale experiment.
#[derive(Clone, Debug, Default)]
pub struct MasterStats {
    /// Reports billed.
    pub reports: u64,
    /// Records written.
    pub records: u64,
    /// Records already in the store (a report seen twice).
    pub duplicates: u64,
    /// Purchases sent to a host because its port announced the VM.
    pub placements: u64,
    /// Purchase requests answered: admitted, refused.
    pub admitted: u64,
    /// Refused.
    pub refused: u64,
    /// Dynamic guarantees rewritten.
    pub dynamic_updates: u64,
    /// Per report, milliseconds from its counters read to its records committed.
    pub billing_lag_ms: Vec<u64>,
}

/// The master.
pub struct Master {
    settings: MasterSettings,
    keys: Keys,
    store: Arc<StoreThread>,
    /// Every purchase with its key's revision.
    purchases: BTreeMap<String, (i64, Purchase)>,
    /// Announced ports: VM -> host.
    announced: BTreeMap<String, String>,
    /// Live hosts' uplink rates, wire bits/s: their VMs' C in the price functions.
    uplinks: BTreeMap<String, u64>,
    /// Hosts holding their lease.
    alive: BTreeSet<String>,
    /// Purchase requests waiting for an answer, with their keys' revisions.
    requests: BTreeMap<String, (i64, PurchaseRequest)>,
    /// Every VM's and host's measured utilization, as in the store.
    book: Arc<Mutex<UtilizationBook>>,
    /// The load last published per host.
    published: BTreeMap<String, HostLoadView>,
    /// A publication failed: publish every host again.
    publish_failed: Arc<AtomicBool>,
    /// The guarantee text last written for each dynamic VM.
    dynamic_written: BTreeMap<String, String>,
    /// Shared with whoever wants to watch.
    pub stats: Arc<Mutex<MasterStats>>,
}

impl Master {
    /// Opens the store.
    pub fn new(settings: MasterSettings) -> Result<Master, ClusterError> {
        settings.prices.validate()?;
        settings.admission.validate().map_err(|why| ClusterError::vm("-", format!("admission: {why}")))?;
        let store = Arc::new(StoreThread::open(settings.store.clone())?);
        Ok(Master {
            keys: Keys::new(&settings.prefix),
            settings,
            store,
            purchases: BTreeMap::new(),
            announced: BTreeMap::new(),
            uplinks: BTreeMap::new(),
            alive: BTreeSet::new(),
            requests: BTreeMap::new(),
            book: Arc::default(),
            published: BTreeMap::new(),
            publish_failed: Arc::default(),
            dynamic_written: BTreeMap::new(),
            stats: Arc::default(),
        })
    }

    /// Serves until `stop`, reconnecting to etcd whenever it goes away.
    pub async fn serve(mut self, stop: Arc<AtomicBool>) -> Result<(), ClusterError> {
        while !stop.load(Ordering::SeqCst) {
            match self.session(&stop).await {
                Ok(()) => return Ok(()),
                Err(err) => tracing::warn!("master: {err}; retrying"),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Ok(())
    }

    async fn session(&mut self, stop: &AtomicBool) -> Result<(), ClusterError> {
        let mut client = connect(&self.settings.endpoints, self.settings.tls.as_ref()).await?;
        let root = format!("{}/", self.settings.prefix.trim_end_matches('/'));
        let (revision, kvs) = get_prefix(&mut client, &root, false).await?;
        self.purchases.clear();
        self.announced.clear();
        self.alive.clear();
        self.requests.clear();
        let rows = self.store.run(|s| s.utilization()).await?;
        *self.book.lock().expect("book") =
            UtilizationBook { entries: rows.into_iter().map(|(o, n, d)| ((o, n), d)).collect() };
        let mut reports = Vec::new();
        for kv in &kvs {
            let key = kv.key_str().map_err(e)?.to_string();
            if key.starts_with(self.keys.usage().as_str()) {
                reports.push((key, kv.value().to_vec()));
            } else {
                self.observe(&key, kv.value(), kv.mod_revision(), true);
            }
        }
        tracing::info!(
            "master: {} purchases, {} ports, {} reports waiting",
            self.purchases.len(),
            self.announced.len(),
            reports.len()
        );
        for vm in self.purchases.keys().cloned().collect::<Vec<_>>() {
            self.place_if_announced(&mut client, &vm).await?;
        }
        self.answer_requests(&mut client).await?;
        let mut billing = billing_task::Billing::new();
        for chunk in reports.chunks(billing_task::BATCH_REPORTS) {
            let slot = billing.slot(true).await.expect("waited for");
            self.start_billing(&client, &billing, slot, chunk.to_vec()).await?;
        }
        // Three watches, each its own stream: the usage reports (thousands a second) and, on
        // either side of them in key order, everything else. A stream etcd cannot deliver at
        // once falls behind to its catch-up loop, so purchases never share one with reports.
        let (before_usage, after_usage) = (self.keys.usage(), format!("{}0", self.keys.usage().trim_end_matches('/')));
        let range = |from: &str, to: &str, filters: Vec<WatchFilterType>| {
            let opts = WatchOptions::new().with_range(to).with_start_revision(revision + 1).with_filters(filters);
            let (mut client, from) = (client.clone(), from.to_string());
            async move { client.watch(from, Some(opts)).await }
        };
        let root_end = format!("{}0", root.trim_end_matches('/'));
        let mut control = range(&root, &before_usage, vec![]).await.map_err(e)?;
        let mut control_after = range(&after_usage, &root_end, vec![]).await.map_err(e)?;
        // Reports are deleted only by the master itself, once billed.
        let mut usage = range(&before_usage, &after_usage, vec![WatchFilterType::NoDelete]).await.map_err(e)?;
        let mut last_published = std::time::Instant::now();
        self.publish_loads(&mut client).await?;
        let mut waiting = Vec::new();
        let mut since_billed = std::time::Instant::now();
        while !stop.load(Ordering::SeqCst) {
            tokio::select! {
                msg = control.message() => self.on_events(&mut client, msg).await?,
                msg = control_after.message() => self.on_events(&mut client, msg).await?,
                msg = usage.message() => {
                    waiting.extend(changes(msg)?.into_iter().filter_map(|c| Some((c.key, c.value?))));
                }
                done = billing.done.recv() => {
                    let dynamic = done.expect("the master holds a sender")?;
                    for p in dynamic.values() {
                        self.refresh_dynamic(&mut client, p).await?;
                    }
                }
                _ = tokio::time::sleep(billing_task::BATCH_WAIT) => {}
            }
            // Reports are billed in batches (one store transaction each), up to two at once,
            // while this loop goes on answering purchases: it waits for a batch only when it
            // holds a large backlog.
            let full = waiting.len() >= billing_task::BATCH_REPORTS;
            if full || (!waiting.is_empty() && since_billed.elapsed() >= billing_task::BATCH_WAIT) {
                if let Some(slot) = billing.slot(waiting.len() >= billing_task::MAX_WAITING).await {
                    let batch = waiting.drain(..waiting.len().min(billing_task::BATCH_REPORTS)).collect();
                    self.start_billing(&client, &billing, slot, batch).await?;
                    since_billed = std::time::Instant::now();
                }
            }
            if last_published.elapsed() >= PUBLISH_EVERY {
                self.publish_loads(&mut client).await?;
                last_published = std::time::Instant::now();
            }
        }
        Ok(())
    }

    /// Takes in a watch message on purchases and hosts: places what needs placing, then
    /// answers the requests waiting.
    async fn on_events(
        &mut self,
        client: &mut Client,
        msg: Result<Option<WatchResponse>, etcd_client::Error>,
    ) -> Result<(), ClusterError> {
        for c in changes(msg)? {
            let put = c.value.is_some();
            if let Some(vm) = self.observe(&c.key, c.value.as_deref().unwrap_or_default(), c.revision, put) {
                self.place_if_announced(client, &vm).await?;
            }
        }
        self.answer_requests(client).await
    }

    /// Takes in a purchase or host key; returns the VM that may now need placing.
    fn observe(&mut self, key: &str, value: &[u8], revision: i64, put: bool) -> Option<String> {
        if let Some(vm) = self.keys.parse_request_key(key) {
            match serde_json::from_slice::<PurchaseRequest>(value) {
                Ok(r) if put && r.answer.is_none() => {
                    self.requests.insert(vm.to_string(), (revision, r));
                }
                Ok(_) => {
                    self.requests.remove(vm);
                }
                Err(err) if put => tracing::warn!("master: {key} is not a purchase request: {err}"),
                Err(_) => {}
            }
            return None;
        }
        if let Some(vm) = self.keys.parse_vm_key(key) {
            if !put {
                self.purchases.remove(vm);
                self.dynamic_written.remove(vm);
                return None;
            }
            match serde_json::from_slice::<Purchase>(value) {
                Ok(p) => {
                    self.purchases.insert(vm.to_string(), (revision, p));
                    return Some(vm.to_string());
                }
                Err(err) => tracing::warn!("master: {key} is not a purchase: {err}"),
            }
            return None;
        }
        let (host, kind, name) = self.keys.parse_host_key(key)?;
        match (kind, put) {
            ("ports", true) => {
                self.announced.insert(name.to_string(), host.to_string());
                return Some(name.to_string());
            }
            ("ports", false) if self.announced.get(name).is_some_and(|h| h == host) => {
                self.announced.remove(name);
            }
            ("alive", true) => {
                self.alive.insert(host.to_string());
                let uplink = serde_json::from_slice::<HostInfo>(value).ok().and_then(|i| i.uplink_bps);
                match uplink {
                    Some(bps) => self.uplinks.insert(host.to_string(), bps),
                    None => self.uplinks.remove(host),
                };
                tracing::info!("master: host {host} is up (uplink {uplink:?} bit/s)");
            }
            ("alive", false) => {
                self.alive.remove(host);
                self.uplinks.remove(host);
                tracing::warn!("master: host {host} lost its lease");
            }
            _ => {}
        }
        None
    }

    /// Sends a purchase to the host that announced its VM, if that is not where it is already
    /// (the VM started, or moved).
    async fn place_if_announced(&mut self, client: &mut Client, vm: &str) -> Result<(), ClusterError> {
        let (Some(host), Some((revision, purchase))) = (self.announced.get(vm), self.purchases.get(vm)) else {
            return Ok(());
        };
        if purchase.host.as_deref() == Some(host.as_str()) {
            return Ok(());
        }
        let (host, revision, mut moved) = (host.clone(), *revision, purchase.clone());
        let old_host = moved.host.replace(host.clone());
        let in_force = self.in_force(&moved).await?;
        let enforcement = Enforcement {
            vm: vm.into(),
            options: moved.enforcement_options(&in_force),
            issued_unix_ns: unix_ns(),
            link_overcommit: Some(self.overcommit_with(&host, &moved)),
        };
        let mut ops = vec![
            TxnOp::put(self.keys.vm(vm), to_json(&moved), None),
            TxnOp::put(self.keys.guarantee(&host, vm), to_json(&enforcement), None),
        ];
        if let Some(old) = old_host.filter(|o| *o != host) {
            ops.push(TxnOp::delete(self.keys.guarantee(&old, vm), None));
        }
        // Only if nobody changed the purchase meanwhile; else its new value comes as an event.
        let txn = Txn::new().when([Compare::mod_revision(self.keys.vm(vm), CompareOp::Equal, revision)]).and_then(ops);
        if client.txn(txn).await.map_err(e)?.succeeded() {
            tracing::info!("master: {vm} placed on {host}");
            self.stats.lock().expect("stats").placements += 1;
        }
        Ok(())
    }

    /// The guarantee a purchase has now: a dynamic one's remaining size and time.
    async fn in_force(&self, p: &Purchase) -> Result<Guarantee, ClusterError> {
        let g = p.guarantee;
        let Guarantee::Dynamic { total_bytes, duration_ns } = g else { return Ok(g) };
        let (vm, from) = (p.vm.clone(), p.bought_unix_ms);
        let sent = self.store.run(move |s| s.sent_since(&vm, from)).await?;
        Ok(dynamic_in_force(total_bytes, duration_ns, p.bought_unix_ms, sent, unix_ns() / 1_000_000))
    }

    /// Rewrites a dynamic purchase's enforcement as what is left of it (seed 003 Sec. 4).
    async fn refresh_dynamic(&mut self, client: &mut Client, p: &Purchase) -> Result<(), ClusterError> {
        let in_force = self.in_force(p).await?;
        let text = slaswitch_config::link_policy::guarantee_text(&in_force);
        if in_force == Guarantee::Fairness && self.dynamic_written.get(&p.vm) == Some(&text) {
            return Ok(());
        }
        let host = p.host.as_deref().expect("placed");
        let enforcement = Enforcement {
            vm: p.vm.clone(),
            options: p.enforcement_options(&in_force),
            issued_unix_ns: unix_ns(),
            link_overcommit: Some(self.overcommit_with(host, p)),
        };
        client.put(self.keys.guarantee(host, &p.vm), to_json(&enforcement), None).await.map_err(e)?;
        self.dynamic_written.insert(p.vm.clone(), text);
        self.stats.lock().expect("stats").dynamic_updates += 1;
        Ok(())
    }
}

mod billing_task;
mod requests;

/// A key written (with its value) or deleted, at a revision.
struct Change {
    key: String,
    value: Option<Vec<u8>>,
    revision: i64,
}

/// The changes a watch message brings; an ended or cancelled watch is an error.
fn changes(msg: Result<Option<WatchResponse>, etcd_client::Error>) -> Result<Vec<Change>, ClusterError> {
    let msg = msg.map_err(e)?.ok_or(FleetError::WatchEnded)?;
    if msg.canceled() {
        return Err(FleetError::WatchCancelled(msg.cancel_reason().to_string()).into());
    }
    let mut out = Vec::new();
    for ev in msg.events() {
        let Some(kv) = ev.kv() else { continue };
        let value = (ev.event_type() == EventType::Put).then(|| kv.value().to_vec());
        out.push(Change { key: kv.key_str().map_err(e)?.to_string(), value, revision: kv.mod_revision() });
    }
    Ok(out)
}

/// How often each host's load is published (its measured utilization moves with every cycle).
const PUBLISH_EVERY: Duration = Duration::from_secs(5);

type Job = Box<dyn FnOnce(&mut Store) + Send>;

/// The store on a thread of its own, which opens, uses and closes it: the PostgreSQL client
/// blocks and runs a runtime of its own, which may be neither used nor dropped on an async
/// thread.
struct StoreThread {
    jobs: std::sync::mpsc::Sender<Job>,
}

impl StoreThread {
    fn open(spec: StoreSpec) -> Result<StoreThread, ClusterError> {
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        let (opened_tx, opened) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("billing-store".into())
            .spawn(move || {
                let mut store = match spec.open() {
                    Ok(s) => {
                        let _ = opened_tx.send(Ok(()));
                        s
                    }
                    Err(e) => {
                        let _ = opened_tx.send(Err(e));
                        return;
                    }
                };
                // Ends when the master, and with it the sender, is gone.
                while let Ok(job) = queue.recv() {
                    job(&mut store);
                }
            })
            .map_err(ClusterError::io("cannot start the billing store's thread"))?;
        opened.recv().map_err(|_| ClusterError::StoreThread)??;
        Ok(StoreThread { jobs })
    }

    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> Result<T, ClusterError> + Send + 'static,
    ) -> Result<T, ClusterError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Box::new(move |s: &mut Store| {
                let _ = tx.send(f(s));
            }))
            .map_err(|_| ClusterError::StoreThread)?;
        rx.await.map_err(|_| ClusterError::StoreThread)?
    }
}

pub(crate) fn to_json(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).expect("cluster values serialise")
}

/// The price functions' parameters for `host`'s VMs: C is the uplink rate the host announced,
/// or the master's setting for a host that announced none (seed 003 Sec. 3.3 prices a share
/// of the VM's own host's link).
fn host_prices(default: &PriceParams, uplinks: &BTreeMap<String, u64>, host: &str) -> PriceParams {
    match uplinks.get(host) {
        Some(&bps) if bps > 0 => PriceParams { link_capacity_bps: bps, ..*default },
        _ => *default,
    }
}

#[cfg(test)]
mod host_price_tests {
    use super::*;

    #[test]
    fn a_host_s_vms_are_priced_by_the_uplink_it_announced() {
        let default = PriceParams::default();
        let uplinks = BTreeMap::from([("h1".to_string(), 1_000_000_000u64), ("h0".to_string(), 0)]);
        assert_eq!(host_prices(&default, &uplinks, "h1").link_capacity_bps, 1_000_000_000);
        assert_eq!(host_prices(&default, &uplinks, "h2"), default, "a host that announced nothing");
        assert_eq!(host_prices(&default, &uplinks, "h0"), default, "a zero rate is no capacity to price by");
        assert_eq!(host_prices(&default, &uplinks, "h1").p0_per_mbit, default.p0_per_mbit);
    }
}
