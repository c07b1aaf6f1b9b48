//! The agent's writes to etcd (seed 003 Sec. 4: ports announced, answers, usage reports). A
//! write runs beside the agent's loop, one at a time: a purchase that arrives while etcd takes
//! the host's report (the whole fleet reports at the same cycle boundary) is applied at once,
//! not after that write returns.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use etcd_client::{Client, PutOptions, Txn, TxnOp};

use super::{json, Agent, LocalSwitch};
use crate::etcd::{e, MAX_TXN_OPS};
use crate::purchase::Status;
use crate::usage::UsageValue;
use crate::FleetError;

/// A write under way.
pub(super) type Write = Pin<Box<dyn Future<Output = Result<(), etcd_client::Error>> + Send>>;

/// What a write carries, settled when etcd answers.
pub(super) struct Flush {
    new_ports: Vec<String>,
    gone_ports: Vec<String>,
    /// Statuses written (`None`: deleted).
    answers: BTreeMap<String, Option<Status>>,
    /// The newest cycle whose report it holds.
    last_cycle: Option<u64>,
}

impl<S: LocalSwitch> Agent<S> {
    /// Starts writing what changed: ports and answers at once, reports once
    /// `report_every_cycles` are queued (or all with `last`), in transactions of at most
    /// [`MAX_TXN_OPS`]; `None` when there is nothing to write.
    pub(super) fn start_flush(&mut self, client: &Client, lease: i64, last: bool) -> Option<(Write, Flush)> {
        let host = self.settings.host.clone();
        let leased = || Some(PutOptions::new().with_lease(lease));
        let new_ports: Vec<String> = self.ports.difference(&self.announced).cloned().collect();
        let gone_ports: Vec<String> = self.announced.difference(&self.ports).cloned().collect();
        let answers = std::mem::take(&mut self.dirty);
        let mut ops: Vec<TxnOp> =
            new_ports.iter().map(|vm| TxnOp::put(self.keys.port(&host, vm), "{}", leased())).collect();
        ops.extend(gone_ports.iter().map(|vm| TxnOp::delete(self.keys.port(&host, vm), None)));
        ops.extend(answers.iter().map(|(vm, status)| match status {
            Some(s) => TxnOp::put(self.keys.status(&host, vm), json(s), leased()),
            None => TxnOp::delete(self.keys.status(&host, vm), None),
        }));
        let due = last || self.pending.len() >= self.settings.report_every_cycles;
        let reports = if due { self.pending.len() } else { 0 };
        // A key per `report_every_cycles` cycles: etcd's cost is per key written.
        let per_key = self.settings.report_every_cycles.max(1);
        let written = &self.pending.make_contiguous()[..reports];
        for batch in written.chunks(per_key) {
            let value = UsageValue::of(batch.to_vec());
            ops.push(TxnOp::put(self.keys.usage_report(&host, batch[0].cycle), json(&value), None));
        }
        if ops.is_empty() {
            return None;
        }
        let last_cycle = written.last().map(|r| r.cycle);
        let mut client = client.clone();
        let write: Write = Box::pin(async move {
            for chunk in ops.chunks(MAX_TXN_OPS) {
                client.txn(Txn::new().and_then(chunk.to_vec())).await?;
            }
            Ok(())
        });
        Some((write, Flush { new_ports, gone_ports, answers, last_cycle }))
    }

    /// Settles a write: what it held is now in etcd, or is written again at the next flush
    /// (ports and answers whole; a report committed twice is billed once).
    pub(super) fn finish_flush(
        &mut self,
        flush: Flush,
        result: Result<(), etcd_client::Error>,
    ) -> Result<(), FleetError> {
        if let Err(err) = result {
            for (vm, status) in flush.answers {
                self.dirty.entry(vm).or_insert(status);
            }
            return Err(e(err));
        }
        self.announced.extend(flush.new_ports);
        for vm in &flush.gone_ports {
            self.announced.remove(vm);
        }
        if let Some(cycle) = flush.last_cycle {
            self.pending.retain(|r| r.cycle > cycle);
        }
        Ok(())
    }

    /// Writes what changed and waits for it.
    pub(super) async fn flush(&mut self, client: &Client, lease: i64, last: bool) -> Result<(), FleetError> {
        match self.start_flush(client, lease, last) {
            Some((write, flush)) => {
                let result = write.await;
                self.finish_flush(flush, result)
            }
            None => Ok(()),
        }
    }
}
