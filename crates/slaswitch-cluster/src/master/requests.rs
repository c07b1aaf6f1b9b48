//! The master's answers to purchase requests (seed 003 Sec. 4): each is admitted on a host by
//! the failure model ([`crate::admission`]) and sent to it, or refused with the figures, in one
//! etcd transaction with its answer; and each host's load, published for `hosts`.

use std::collections::BTreeMap;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};

use super::{to_json, Master};
use crate::admission::Fleet;
use crate::etcd::e;
use crate::purchase::{unix_ns, Admission, Enforcement, HostLoadView, Purchase, PurchaseRequest};
use crate::ClusterError;

impl Master {
    /// Each live host's link, bits/s: the rate it announced, or the master's setting.
    pub(super) fn capacities(&self) -> BTreeMap<String, f64> {
        let default_bps = self.settings.prices.link_capacity_bps as f64;
        self.alive
            .iter()
            .map(|h| (h.clone(), self.uplinks.get(h).filter(|&&b| b > 0).map_or(default_bps, |&b| b as f64)))
            .collect()
    }

    /// Answers every waiting request, in VM order. A request for a named host that does not
    /// hold its lease waits for it (its capacity is unknown until it announces it); the buyer
    /// gives up waiting on its own.
    pub(super) async fn answer_requests(&mut self, client: &mut Client) -> Result<(), ClusterError> {
        for (vm, (revision, request)) in std::mem::take(&mut self.requests) {
            if request.purchase.host.as_ref().is_some_and(|h| !self.alive.contains(h)) {
                self.requests.insert(vm, (revision, request));
                continue;
            }
            self.answer(client, &vm, revision, request).await?;
        }
        Ok(())
    }

    /// Where `p` may go: its host when it names one, else the host announcing its port, else
    /// every live host.
    fn candidates(&self, p: &Purchase) -> Vec<String> {
        match p.host.as_ref().or_else(|| self.announced.get(&p.vm)) {
            Some(h) => vec![h.clone()],
            None => self.alive.iter().cloned().collect(),
        }
    }

    /// Runs `f` on the fleet as admission sees it now.
    fn with_fleet<T>(&self, f: impl FnOnce(&Fleet) -> T) -> T {
        let book = self.book.lock().expect("book");
        let capacity_bps = self.capacities();
        f(&Fleet::new(&self.settings.admission, &book, self.purchases.values().map(|(_, p)| p), &capacity_bps))
    }

    fn decide(&self, p: &Purchase) -> Admission {
        if let Err(err) = p.validate() {
            return Admission::refused(None, err.to_string());
        }
        if let Some((_, held)) = self.purchases.get(&p.vm).filter(|(_, h)| h.tenant != p.tenant) {
            return Admission::refused(None, format!("already bought by tenant {}; release it first", held.tenant));
        }
        self.with_fleet(|fleet| fleet.decide(p, &self.candidates(p)))
    }

    /// The committed ratio `host` has with `p` in force: what its switch's admission allows.
    pub(super) fn overcommit_with(&self, host: &str, p: &Purchase) -> f64 {
        self.with_fleet(|fleet| fleet.load(host, &p.vm).assess_with(fleet.tenancy(p)).committed_ratio.max(1.0))
    }

    async fn answer(
        &mut self,
        client: &mut Client,
        vm: &str,
        revision: i64,
        request: PurchaseRequest,
    ) -> Result<(), ClusterError> {
        let answer = self.decide(&request.purchase);
        let mut ops = Vec::new();
        let mut placed = None;
        if let (true, Some(host)) = (answer.admitted, answer.host.clone()) {
            let mut p = request.purchase.clone();
            p.host = Some(host.clone());
            p.admission = Some(answer.clone());
            let in_force = self.in_force(&p).await?;
            let enforcement = Enforcement {
                vm: vm.into(),
                options: p.enforcement_options(&in_force),
                // From the request, so the host's answer times the whole path, admission included.
                issued_unix_ns: request.requested_unix_ns,
                link_overcommit: answer.figures.map(|f| f.committed_ratio.max(1.0)),
            };
            ops.push(TxnOp::put(self.keys.vm(vm), to_json(&p), None));
            ops.push(TxnOp::put(self.keys.guarantee(&host, vm), to_json(&enforcement), None));
            let old_host = self.purchases.get(vm).and_then(|(_, q)| q.host.clone());
            if let Some(old) = old_host.filter(|o| *o != host) {
                ops.push(TxnOp::delete(self.keys.guarantee(&old, vm), None));
            }
            placed = Some(p);
        }
        let answered = PurchaseRequest { answer: Some(answer.clone()), ..request };
        ops.push(TxnOp::put(self.keys.request(vm), to_json(&answered), None));
        // Only if the request is still the one decided; a newer one comes as an event.
        let when = [Compare::mod_revision(self.keys.request(vm), CompareOp::Equal, revision)];
        let done = client.txn(Txn::new().when(when).and_then(ops)).await.map_err(e)?;
        if !done.succeeded() {
            return Ok(());
        }
        let mut stats = self.stats.lock().expect("stats");
        match placed {
            Some(p) => {
                stats.admitted += 1;
                tracing::info!("master: {vm} admitted on {} ({:?})", p.host.as_deref().unwrap_or("-"), answer.figures);
                let committed = done.header().map_or(revision, |h| h.revision());
                self.purchases.insert(vm.to_string(), (committed, p));
            }
            None => {
                stats.refused += 1;
                tracing::info!("master: {vm} refused: {}", answer.reason.as_deref().unwrap_or(""));
            }
        }
        Ok(())
    }

    /// Each live host's load (its committed ratio, Eq. 2's failure probability and measured
    /// utilization), written where it changed.
    pub(super) async fn publish_loads(&mut self, client: &mut Client) -> Result<(), ClusterError> {
        if self.publish_failed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.published.clear();
        }
        let measured: BTreeMap<String, f64> = {
            let book = self.book.lock().expect("book");
            self.alive.iter().filter_map(|h| Some((h.clone(), round4(book.host(h)?.mean_utilization()?)))).collect()
        };
        let views: Vec<(String, HostLoadView)> = self.with_fleet(|fleet| {
            fleet
                .hosts()
                .map(|h| {
                    let load = fleet.load(h, "");
                    let view = HostLoadView {
                        capacity_bps: load.capacity_bps as u64,
                        vms: load.vms.len(),
                        figures: rounded(load.assess()),
                        measured_utilization: measured.get(h).copied(),
                        assessed_unix_ms: 0,
                    };
                    (h.to_string(), view)
                })
                .collect()
        });
        let mut ops = Vec::new();
        for (host, mut view) in views {
            if self.published.get(&host) == Some(&view) {
                continue;
            }
            self.published.insert(host.clone(), view.clone());
            view.assessed_unix_ms = unix_ns() / 1_000_000;
            ops.push(TxnOp::put(self.keys.load(&host), to_json(&view), None));
        }
        // Written beside the loop, in transactions of at most 128 operations (etcd's default
        // limit): a purchase arriving meanwhile is not held up. A failed write is published
        // again at the next round.
        let mut client = client.clone();
        let failed = self.publish_failed.clone();
        tokio::spawn(async move {
            for chunk in ops.chunks(crate::etcd::MAX_TXN_OPS) {
                if let Err(err) = client.txn(Txn::new().and_then(chunk.to_vec())).await {
                    tracing::warn!("master: publishing host loads: {err}");
                    failed.store(true, std::sync::atomic::Ordering::SeqCst);
                    return;
                }
            }
        });
        Ok(())
    }
}

fn round4(v: f64) -> f64 {
    (v * 1e4).round() / 1e4
}

/// Figures to four places, so a host is not rewritten for noise in the last digits.
fn rounded(a: slaswitch_qos::placement::Assessment) -> slaswitch_qos::placement::Assessment {
    slaswitch_qos::placement::Assessment {
        committed_ratio: round4(a.committed_ratio),
        failure_probability: round4(a.failure_probability),
        expected_utilization: round4(a.expected_utilization),
    }
}
