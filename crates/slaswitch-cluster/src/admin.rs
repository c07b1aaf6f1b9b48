//! The operator's verbs on the cluster: buy, change and release a VM's purchase; list hosts and
//! VMs. Each is one etcd transaction, checked first with the switch's own validation, so a bad
//! purchase is refused before any host sees it.

use std::collections::BTreeMap;

use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp};
use serde::Serialize;

use crate::etcd::e;
use crate::keys::Keys;
use crate::master::to_json;
use slaswitch_config::link_policy::guarantee_text;
use slaswitch_qos::egress::softbw::Guarantee;

use crate::purchase::{unix_ns, EnforcementState, HostInfo, HostLoadView, Purchase, PurchaseRequest, Status};
use crate::store::{Record, Store};
use crate::ClusterError;
use slaswitch_agent::FleetError;

async fn purchase_of(client: &mut Client, keys: &Keys, vm: &str) -> Result<(i64, Purchase), ClusterError> {
    let got = client.get(keys.vm(vm), None).await.map_err(e)?;
    let kv = got.kvs().first().ok_or_else(|| ClusterError::vm(vm, "nothing is bought for it"))?;
    let p = serde_json::from_slice(kv.value()).map_err(|cause| FleetError::NotPurchase { key: keys.vm(vm), cause })?;
    Ok((kv.mod_revision(), p))
}

/// How long `buy` and `set-guarantee` wait for the master's answer.
pub const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Asks the master for `purchase` (etcd `requests/VM`) and waits for its answer: the purchase
/// as admitted (its host and figures) with the revision of the write that sent it to its host,
/// or the refusal with the figures. Nothing changes on a refusal.
async fn ask(client: &mut Client, keys: &Keys, purchase: Purchase) -> Result<(Purchase, i64), ClusterError> {
    let key = keys.request(&purchase.vm);
    let request = PurchaseRequest { purchase, requested_unix_ns: unix_ns(), answer: None };
    let put = client.put(key.as_str(), to_json(&request), None).await.map_err(e)?;
    let asked = put.header().map_or(0, |h| h.revision());
    let opts = etcd_client::WatchOptions::new().with_start_revision(asked + 1);
    let mut watch = client.watch(key.as_str(), Some(opts)).await.map_err(e)?;
    let vm = request.purchase.vm.clone();
    loop {
        let msg = tokio::time::timeout(ANSWER_WITHIN, watch.message())
            .await
            .map_err(|_| {
                ClusterError::vm(
                    &vm,
                    format!("no master answered within {} s; the request waits at {key}", ANSWER_WITHIN.as_secs()),
                )
            })?
            .map_err(e)?
            .ok_or(FleetError::WatchEnded)?;
        for kv in msg.events().iter().filter_map(|ev| ev.kv()) {
            let Ok(r) = serde_json::from_slice::<PurchaseRequest>(kv.value()) else { continue };
            match r.answer {
                Some(a) if a.admitted => {
                    let mut p = r.purchase;
                    p.host = a.host.clone();
                    p.admission = Some(a);
                    return Ok((p, kv.mod_revision()));
                }
                Some(a) => return Err(ClusterError::vm(&vm, format!("refused: {}", a.reason.unwrap_or_default()))),
                None if r.requested_unix_ns != request.requested_unix_ns => {
                    return Err(ClusterError::vm(&vm, "another request for it came meanwhile; try again"));
                }
                None => {}
            }
        }
    }
}

/// Buys `purchase`: the master admits it on its host (given, or the one whose port announces
/// it, or the first live host the failure model allows) and sends it there, or refuses it.
/// Refused at once if the VM already has a purchase.
pub async fn buy(client: &mut Client, keys: &Keys, purchase: Purchase) -> Result<Purchase, ClusterError> {
    purchase.validate()?;
    if let Ok((_, held)) = purchase_of(client, keys, &purchase.vm).await {
        let why = format!(
            "already bought by tenant {} ({}); use set-guarantee, or release it first",
            held.tenant,
            guarantee_text(&held.guarantee)
        );
        return Err(ClusterError::vm(&purchase.vm, why));
    }
    Ok(ask(client, keys, purchase).await?.0)
}

/// Changes a VM's guarantee (a dynamic one starts counting again now) and, when given, its
/// cycle purchase, on the host it is on; returns it with the etcd revision of the change.
pub async fn set_guarantee(
    client: &mut Client,
    keys: &Keys,
    vm: &str,
    guarantee: Guarantee,
    cycles: Option<BTreeMap<String, String>>,
) -> Result<(Purchase, i64), ClusterError> {
    let (_, mut p) = purchase_of(client, keys, vm).await?;
    p.guarantee = guarantee;
    if let Some(c) = cycles {
        p.cycles = c;
    }
    p.bought_unix_ms = unix_ns() / 1_000_000;
    p.admission = None;
    p.validate()?;
    ask(client, keys, p).await
}

/// Purchase-to-enforcement latency, `rounds` times: the VM's guarantee is changed (alternating
/// between two rates near its own) and its host's answer awaited. Per round: (from the write
/// to the switch applying it, as the agent timed it; from the write to the answer visible
/// here), milliseconds.
pub async fn measure_enforcement(
    client: &mut Client,
    keys: &Keys,
    vm: &str,
    rounds: usize,
) -> Result<Vec<(f64, f64)>, ClusterError> {
    let (_, p) = purchase_of(client, keys, vm).await?;
    let host = p.host.clone().ok_or_else(|| ClusterError::vm(vm, "not placed on a host yet"))?;
    let status_key = keys.status(&host, vm);
    let mut watch = client.watch(status_key.as_str(), None).await.map_err(e)?;
    let mut out = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let rate = Guarantee::Strict { rate_bps: if i % 2 == 0 { 101_000_000 } else { 100_000_000 } };
        let t0 = std::time::Instant::now();
        let (_, revision) = set_guarantee(client, keys, vm, rate, None).await?;
        loop {
            let msg = tokio::time::timeout(std::time::Duration::from_secs(10), watch.message())
                .await
                .map_err(|_| ClusterError::vm(vm, format!("host {host} did not answer within 10 s")))?
                .map_err(e)?
                .ok_or(FleetError::WatchEnded)?;
            let answered = msg
                .events()
                .iter()
                .filter_map(|ev| ev.kv())
                .filter_map(|kv| serde_json::from_slice::<Status>(kv.value()).ok())
                .find(|s| s.revision >= revision);
            if let Some(s) = answered {
                if s.state != EnforcementState::Applied {
                    return Err(ClusterError::vm(vm, format!("{} ({})", s.state, s.reason.unwrap_or_default())));
                }
                let applied_ms = s.answered_unix_ns.saturating_sub(s.issued_unix_ns) as f64 / 1e6;
                out.push((applied_ms, t0.elapsed().as_secs_f64() * 1e3));
                break;
            }
        }
    }
    let _ = set_guarantee(client, keys, vm, p.guarantee, None).await;
    Ok(out)
}

/// Ends a VM's purchase; its host puts the port back to the switch's defaults.
pub async fn release(client: &mut Client, keys: &Keys, vm: &str) -> Result<Purchase, ClusterError> {
    let (revision, p) = purchase_of(client, keys, vm).await?;
    let mut ops = vec![TxnOp::delete(keys.vm(vm), None), TxnOp::delete(keys.request(vm), None)];
    if let Some(host) = &p.host {
        ops.push(TxnOp::delete(keys.guarantee(host, vm), None));
    }
    let txn = Txn::new().when([Compare::mod_revision(keys.vm(vm), CompareOp::Equal, revision)]).and_then(ops);
    if !client.txn(txn).await.map_err(e)?.succeeded() {
        return Err(ClusterError::vm(vm, "its purchase changed meanwhile; try again"));
    }
    Ok(p)
}

/// A host as `hosts` shows it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HostView {
    /// Its id.
    pub host: String,
    /// It holds its lease.
    pub alive: bool,
    /// Its agent's last (re)connection, Unix milliseconds.
    pub since_unix_ms: Option<u64>,
    /// Its uplink's line rate, wire bits/s, as its agent announced it (C in its VMs' prices).
    pub uplink_bps: Option<u64>,
    /// The VM ports it announces.
    pub ports: Vec<String>,
    /// Purchases it is asked to enforce.
    pub guarantees: usize,
    /// Of those, applied and refused.
    pub applied: usize,
    /// Refused.
    pub refused: usize,
    /// Its committed ratio, failure probability and measured utilization, as the master last
    /// assessed them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load: Option<HostLoadView>,
}

/// Every host with keys in etcd.
pub async fn hosts(client: &mut Client, keys: &Keys) -> Result<Vec<HostView>, ClusterError> {
    let got = client.get(keys.hosts(), Some(GetOptions::new().with_prefix())).await.map_err(e)?;
    let mut hosts: BTreeMap<String, HostView> = BTreeMap::new();
    for kv in got.kvs() {
        let Some((host, kind, name)) = keys.parse_host_key(kv.key_str().map_err(e)?) else { continue };
        let h = hosts.entry(host.to_string()).or_insert_with(|| HostView { host: host.into(), ..HostView::default() });
        match kind {
            "alive" => {
                h.alive = true;
                let info = serde_json::from_slice::<HostInfo>(kv.value()).ok();
                h.since_unix_ms = info.as_ref().map(|i| i.since_unix_ms);
                h.uplink_bps = info.and_then(|i| i.uplink_bps);
            }
            "ports" => h.ports.push(name.to_string()),
            "load" => h.load = serde_json::from_slice(kv.value()).ok(),
            "guarantees" => h.guarantees += 1,
            "status" => match serde_json::from_slice::<Status>(kv.value()).map(|s| s.state) {
                Ok(EnforcementState::Applied) => h.applied += 1,
                Ok(EnforcementState::Refused) => h.refused += 1,
                _ => {}
            },
            _ => {}
        }
    }
    Ok(hosts.into_values().collect())
}

/// A VM as `vms` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct VmView {
    /// What was bought.
    #[serde(flatten)]
    pub purchase: Purchase,
    /// Its host's answer.
    pub status: Option<Status>,
    /// Its host holds its lease.
    pub host_alive: bool,
    /// Its latest billed cycle.
    pub latest: Option<Record>,
}

/// Every purchase with its host's answer and its latest billed cycle (from `store`, if given).
pub async fn vms(client: &mut Client, keys: &Keys, store: Option<&mut Store>) -> Result<Vec<VmView>, ClusterError> {
    let got = client.get(keys.vms(), Some(GetOptions::new().with_prefix())).await.map_err(e)?;
    let purchases: Vec<Purchase> = got.kvs().iter().filter_map(|kv| serde_json::from_slice(kv.value()).ok()).collect();
    let now_ms = unix_ns() / 1_000_000;
    let recent = match store {
        Some(s) => s.records(None, now_ms.saturating_sub(10_000), now_ms + 60_000)?,
        None => Vec::new(),
    };
    let mut views = Vec::new();
    for p in purchases {
        let (status, host_alive) = match &p.host {
            Some(h) => {
                let s = client.get(keys.status(h, &p.vm), None).await.map_err(e)?;
                let a = client.get(keys.alive(h), None).await.map_err(e)?;
                (s.kvs().first().and_then(|kv| serde_json::from_slice(kv.value()).ok()), !a.kvs().is_empty())
            }
            None => (None, false),
        };
        let latest = recent.iter().rev().find(|r| r.vm == p.vm).cloned();
        views.push(VmView { purchase: p, status, host_alive, latest });
    }
    Ok(views)
}
