//! VTRR, virtual-time round robin (Nieh, Vaill and Zhong, USENIX ATC 2001): O(1) proportional
//! share, used by PIE-VDE among tenants and, nested, among a tenant's VMs (seed 004 Sec. IV).
//!
//! Runnable clients sit in a run queue ordered by weight, largest first. Each scheduling cycle
//! gives every client a time counter equal to its weight. After a client runs one quantum, the
//! scheduler moves on to the next client in the queue if that client still has counter left and
//! satisfies the VFT inequality `VFT_next - QVT(t + Q) < Q / w_next`; otherwise it returns to the
//! head of the queue. When every counter is spent a new cycle begins. QVT (queue virtual time)
//! advances by `Q / sum(w)` per quantum; a client's VFT by `Q / w` per quantum it runs. Q = 1 here.
//!
//! With weights 5, 3, 1 this yields c1 c2 c3 c1 c2 c1 c2 c1 c1, the schedule of seed 004's
//! example (Sec. IV); with equal weights it is plain round robin.
//!
//! Clients join when they become backlogged and leave when they empty (work conservation): a
//! joining client gets `VFT = QVT + 1/w`, and keeps the counter it left with if it rejoins within
//! the same cycle, so leaving and rejoining cannot buy extra quanta.

#[derive(Clone, Copy, Debug)]
struct Member {
    weight: u64,
    /// 1 / weight, kept to spare a division per decision.
    inv_weight: f64,
    counter: u64,
    vft: f64,
    /// Cycle in which `counter` was last valid (for a member that left).
    cycle: u64,
    /// `Vtrr::shift_total` when `vft` was last rebased (see `new_cycle`).
    shift_seen: f64,
    runnable: bool,
}

/// Virtual-time round robin (Nieh et al.), the proportional-share core of PIE-VDE.
#[derive(Clone, Debug, Default)]
pub struct Vtrr {
    members: Vec<Option<Member>>,
    /// Runnable member ids, weight descending (ties by id).
    run_queue: Vec<usize>,
    /// Position in `run_queue` of the client that ran last.
    last_pos: Option<usize>,
    qvt: f64,
    runnable_weight: u64,
    /// 1 / runnable_weight: QVT's step per quantum.
    qvt_step: f64,
    counters_left: u64,
    cycle: u64,
    /// No client before this position in `run_queue` has counter left this cycle: going back
    /// to the head starts here, so a pick never walks past spent clients (amortized O(1)).
    first_live: usize,
    /// Sum of the QVT bases every new cycle took off the virtual times. A new cycle rebases
    /// only the runnable members; one that was away catches up when it joins, so a cycle costs
    /// the runnable clients, not every id ever registered (a tenant's VMs have sparse ids).
    shift_total: f64,
}

impl Vtrr {
    /// An empty scheduler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a client (not runnable yet) or changes its weight.
    pub fn set_weight(&mut self, id: usize, weight: u32) {
        assert!(weight > 0, "VTRR weights are positive");
        if id >= self.members.len() {
            self.members.resize(id + 1, None);
        }
        let runnable = matches!(self.members[id], Some(m) if m.runnable);
        if runnable {
            self.leave(id);
        }
        let weight = u64::from(weight);
        self.members[id] = Some(Member {
            weight,
            inv_weight: 1.0 / weight as f64,
            counter: weight,
            vft: 0.0,
            cycle: u64::MAX,
            shift_seen: self.shift_total,
            runnable: false,
        });
        if runnable {
            self.join(id);
        }
    }

    /// Removes member `id`.
    pub fn remove(&mut self, id: usize) {
        if matches!(self.members.get(id), Some(Some(m)) if m.runnable) {
            self.leave(id);
        }
        if let Some(slot) = self.members.get_mut(id) {
            *slot = None;
        }
    }

    /// True when member `id` may run.
    pub fn is_runnable(&self, id: usize) -> bool {
        matches!(self.members.get(id), Some(Some(m)) if m.runnable)
    }

    /// True when some member may run.
    pub fn has_runnable(&self) -> bool {
        !self.run_queue.is_empty()
    }

    /// The client becomes runnable (its queue became non-empty).
    pub fn join(&mut self, id: usize) {
        let (cycle, qvt, shift_total) = (self.cycle, self.qvt, self.shift_total);
        let m = self.members[id].as_mut().expect("join of a registered client");
        if m.runnable {
            return;
        }
        m.runnable = true;
        if m.cycle != cycle {
            m.counter = m.weight;
            m.cycle = cycle;
        }
        m.vft -= shift_total - m.shift_seen;
        m.shift_seen = shift_total;
        m.vft = m.vft.max(qvt + m.inv_weight);
        let (weight, counter) = (m.weight, m.counter);
        let members = &self.members;
        let pos = self.run_queue.partition_point(|&other| {
            let o = members[other].as_ref().expect("runnable member");
            (o.weight, std::cmp::Reverse(other)) > (weight, std::cmp::Reverse(id))
        });
        self.run_queue.insert(pos, id);
        if let Some(last) = self.last_pos {
            if pos <= last {
                self.last_pos = Some(last + 1);
            }
        }
        if pos < self.first_live {
            if counter > 0 {
                self.first_live = pos;
            } else {
                self.first_live += 1;
            }
        }
        self.runnable_weight += weight;
        self.qvt_step = 1.0 / self.runnable_weight as f64;
        self.counters_left += counter;
    }

    /// The client stops being runnable (its queue emptied).
    pub fn leave(&mut self, id: usize) {
        let Some(pos) = self.run_queue.iter().position(|&x| x == id) else { return };
        self.run_queue.remove(pos);
        if pos < self.first_live {
            self.first_live -= 1;
        }
        let m = self.members[id].as_mut().expect("runnable member");
        m.runnable = false;
        self.runnable_weight -= m.weight;
        self.qvt_step = if self.runnable_weight > 0 { 1.0 / self.runnable_weight as f64 } else { 0.0 };
        self.counters_left -= m.counter;
        self.last_pos = match self.last_pos {
            Some(last) if pos < last => Some(last - 1),
            // The client that ran last left: the next one in the queue now sits at its position,
            // so continue from the one before it.
            Some(last) if pos == last => last.checked_sub(1),
            other => other,
        };
    }

    /// Picks the client for the next quantum and charges it; `None` when nothing is runnable.
    #[inline]
    pub fn pick(&mut self) -> Option<usize> {
        if self.run_queue.is_empty() {
            return None;
        }
        if self.counters_left == 0 {
            self.new_cycle();
        }
        let qvt_after = self.qvt + self.qvt_step;
        let candidate = self.last_pos.map_or(0, |p| p + 1);
        let next_ok = self.run_queue.get(candidate).is_some_and(|&id| {
            let m = self.members[id].as_ref().expect("runnable");
            m.counter > 0 && m.vft - qvt_after < m.inv_weight
        });
        let pos = if next_ok {
            candidate
        } else {
            // Back at the head: the first client with counter left (the head, but for ties).
            while self.members[self.run_queue[self.first_live]].as_ref().expect("runnable").counter == 0 {
                self.first_live += 1;
            }
            self.first_live
        };
        let id = self.run_queue[pos];
        let m = self.members[id].as_mut().expect("runnable");
        m.counter -= 1;
        m.vft += m.inv_weight;
        self.counters_left -= 1;
        self.qvt = qvt_after;
        self.last_pos = Some(pos);
        Some(id)
    }

    fn new_cycle(&mut self) {
        self.cycle += 1;
        self.counters_left = 0;
        self.last_pos = None;
        self.first_live = 0;
        // Keep virtual times small so f64 keeps its precision over long runs.
        let base = self.qvt;
        self.qvt = 0.0;
        self.shift_total += base;
        for &id in &self.run_queue {
            let m = self.members[id].as_mut().expect("runnable member");
            m.vft -= base;
            m.shift_seen = self.shift_total;
            m.counter = m.weight;
            m.cycle = self.cycle;
            self.counters_left += m.weight;
        }
    }
}
