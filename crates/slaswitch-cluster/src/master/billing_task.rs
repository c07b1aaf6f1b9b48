//! Billing, pipelined beside the master's loop: reports are priced in the loop (it holds the
//! purchases), then a task of their own writes the records and utilization in one store
//! transaction and deletes the reports from etcd, while the loop goes on answering purchases.
//! At most [`IN_FLIGHT`] batches at once: when the store is slower than the fleet, reports wait
//! in the loop's memory (up to [`MAX_WAITING`]), then in etcd. Each batch tells the loop which
//! dynamic guarantees it billed, so they are rewritten from the committed figures.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, Txn, TxnOp};
use slaswitch_qos::egress::softbw::Guarantee;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::{host_prices, Master};
use crate::billing::price_report;
use crate::etcd::e;
use crate::purchase::{unix_ns, Purchase};
use crate::store::Record;
use crate::usage::{UsageReport, UsageValue};
use crate::utilization::Sample;
use crate::ClusterError;

/// Reports billed in one store transaction, at most.
pub const BATCH_REPORTS: usize = 1024;
/// How long a report waits for its batch to fill.
pub const BATCH_WAIT: Duration = Duration::from_millis(50);
/// Batches written at once.
const IN_FLIGHT: usize = 2;
/// Reports the loop holds while both batches are under way; beyond it the loop waits for a
/// slot, and further reports wait in etcd.
pub const MAX_WAITING: usize = 16 * BATCH_REPORTS;

/// The dynamic purchases a finished batch billed, by VM.
type Billed = Result<BTreeMap<String, Purchase>, ClusterError>;

/// The batches under way.
pub(super) struct Billing {
    slots: Arc<Semaphore>,
    tell: mpsc::UnboundedSender<Billed>,
    /// Finished batches.
    pub done: mpsc::UnboundedReceiver<Billed>,
}

impl Billing {
    pub(super) fn new() -> Billing {
        let (tell, done) = mpsc::unbounded_channel();
        Billing { slots: Arc::new(Semaphore::new(IN_FLIGHT)), tell, done }
    }

    /// A free slot; with `wait`, waits for one.
    pub(super) async fn slot(&self, wait: bool) -> Option<OwnedSemaphorePermit> {
        match wait {
            true => Some(self.slots.clone().acquire_owned().await.expect("never closed")),
            false => self.slots.clone().try_acquire_owned().ok(),
        }
    }
}

impl Master {
    /// Prices `batch` and starts writing it in `slot`. A report that cannot be read is logged
    /// and deleted.
    pub(super) async fn start_billing(
        &mut self,
        client: &Client,
        billing: &Billing,
        slot: OwnedSemaphorePermit,
        batch: Vec<(String, Vec<u8>)>,
    ) -> Result<(), ClusterError> {
        let mut reports = Vec::with_capacity(batch.len());
        for (key, value) in &batch {
            match serde_json::from_slice::<UsageValue>(value) {
                Ok(v) => reports.extend(v.into_reports()),
                Err(err) => {
                    tracing::warn!(
                        "master: {key} is not a usage report ({err}); deleted: {}",
                        String::from_utf8_lossy(value)
                    )
                }
            }
        }
        let (records, dynamic) = self.price(&reports).await?;
        let (store, stats, tell) = (self.store.clone(), self.stats.clone(), billing.tell.clone());
        let (book, capacities) = (self.book.clone(), self.capacities());
        let default_bps = self.settings.prices.link_capacity_bps as f64;
        let mut client = client.clone();
        tokio::spawn(async move {
            let account = move |new: &[&Record]| {
                let mut book = book.lock().expect("book");
                let samples = new.iter().map(|r| Sample {
                    vm: &r.vm,
                    host: &r.host,
                    cycle: r.cycle,
                    rate_bps: r.rate_bps,
                    guarantee_bps: r.guarantee_bps,
                });
                let changed = book.account(samples, |h| capacities.get(h).copied().unwrap_or(default_bps));
                changed.into_iter().map(|k| (k.0, k.1.clone(), book.entries[&k].clone())).collect()
            };
            let count = records.len() as u64;
            let written = async {
                let new = store.run(move |s| s.insert_and(&records, account)).await? as u64;
                {
                    let now_ms = unix_ns() / 1_000_000;
                    let mut s = stats.lock().expect("stats");
                    s.reports += reports.len() as u64;
                    s.records += new;
                    s.duplicates += count - new;
                    s.billing_lag_ms.extend(reports.iter().map(|r| now_ms.saturating_sub(r.read_unix_ms)));
                }
                for chunk in batch.chunks(crate::etcd::MAX_TXN_OPS) {
                    let ops: Vec<TxnOp> = chunk.iter().map(|(key, _)| TxnOp::delete(key.as_str(), None)).collect();
                    client.txn(Txn::new().and_then(ops)).await.map_err(e)?;
                }
                Ok(dynamic)
            };
            let _ = tell.send(written.await);
            drop(slot);
        });
        Ok(())
    }

    /// The records of `reports`, and the dynamic purchases they bill.
    async fn price(&self, reports: &[UsageReport]) -> Result<(Vec<Record>, BTreeMap<String, Purchase>), ClusterError> {
        let mut records = Vec::new();
        let mut dynamic = BTreeMap::new();
        let mut sent = self.sent_by_dynamic(reports).await?;
        for report in reports {
            let purchases: BTreeMap<String, Purchase> = report
                .vms
                .iter()
                .filter_map(|u| self.purchases.get(&u.vm).map(|(_, p)| (u.vm.clone(), p.clone())))
                .collect();
            let prices = host_prices(&self.settings.prices, &self.uplinks, &report.host);
            records.extend(price_report(&prices, report, &purchases, &mut sent));
            for p in purchases.into_values().filter(|p| p.host.as_deref() == Some(report.host.as_str())) {
                if matches!(p.guarantee, Guarantee::Dynamic { .. }) {
                    dynamic.insert(p.vm.clone(), p);
                }
            }
        }
        Ok((records, dynamic))
    }

    /// For each VM of `reports` with a dynamic guarantee, the bytes billed since it was bought
    /// (the store answers after the batches already under way).
    async fn sent_by_dynamic(&self, reports: &[UsageReport]) -> Result<BTreeMap<String, u64>, ClusterError> {
        let mut sent = BTreeMap::new();
        for u in reports.iter().flat_map(|r| &r.vms) {
            let Some((_, p)) = self.purchases.get(&u.vm) else { continue };
            if matches!(p.guarantee, Guarantee::Dynamic { .. }) && !sent.contains_key(&u.vm) {
                let (vm, from) = (u.vm.clone(), p.bought_unix_ms);
                sent.insert(u.vm.clone(), self.store.run(move |s| s.sent_since(&vm, from)).await?);
            }
        }
        Ok(sent)
    }
}
