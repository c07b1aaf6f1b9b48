//! Keeps the machine's other threads off the PMD cores while a run lasts, as a cpuset shield
//! (`cset shield`) would without rebooting with `isolcpus`: a busy-polling PMD that loses its
//! core to an unrelated thread for a millisecond stalls every port it serves, and the latency
//! figures would put that down to the host. Every thread that may run on a PMD core is confined
//! to the other cores; when the shield is dropped each gets its own set back. That includes a
//! thread allowed only on PMD cores: the shield goes up before the run's switches start, so such
//! a thread is not one of their PMDs but one that inherited a narrow set (a sandbox whose init
//! was placed on one core hands that core to every process it starts). Per-CPU kernel threads
//! refuse to move and stay. A test bed killed outright (a second Ctrl-C) leaves the moved
//! threads on the other cores, and a thread a confined one starts during the run inherits its
//! cores and keeps them.

use std::mem::{size_of, zeroed};

/// The threads moved off the PMD cores.
pub struct CoreShield {
    moved: Vec<Moved>,
    /// Threads the kernel refused to move (kernel threads bound to their cores).
    pub refused: usize,
}

/// A thread confined: the cores it had and the cores it was given.
struct Moved {
    tid: libc::pid_t,
    had: libc::cpu_set_t,
    given: libc::cpu_set_t,
}

/// What confining one thread did.
enum Confined {
    Moved(Box<Moved>),
    /// Not on a PMD core, or only on PMD cores, or gone.
    Left,
    Refused,
}

impl CoreShield {
    /// Moves every thread of the machine that the kernel lets move off `pmd_cores`, to the
    /// other online cores. Raised before the run's switches start (their PMDs would be moved).
    pub fn raise(pmd_cores: &[usize]) -> CoreShield {
        let mut shield = CoreShield { moved: Vec::new(), refused: 0 };
        let others = cores_other_than(pmd_cores, slaswitch_datapath::pmd::online_cores());
        for tid in all_thread_ids() {
            match confine(tid, pmd_cores, &others) {
                Confined::Moved(m) => shield.moved.push(*m),
                Confined::Left => {}
                Confined::Refused => shield.refused += 1,
            }
        }
        shield
    }

    /// How many threads it moved.
    pub fn moved(&self) -> usize {
        self.moved.len()
    }
}

/// The command run under a shield (`slaswitch experiment shield`), to which the shield's own
/// process passes a stop signal.
static SHIELDED_CHILD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn pass_on(signal: libc::c_int) {
    let child = SHIELDED_CHILD.load(std::sync::atomic::Ordering::Relaxed);
    if child > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(child, signal) };
    }
}

/// Keeps this process alive until `child` ends, so that a shield held here is dropped (each
/// thread given its cores back): SIGTERM is passed on to the child; SIGINT and SIGHUP, which
/// a terminal sends the child too, are ignored. Call after the child is started: an ignored
/// signal would be ignored by the child as well.
pub fn forward_stop_signals(child: u32) {
    SHIELDED_CHILD.store(child as i32, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: the handler only loads an atomic and calls kill, both async-signal-safe.
    unsafe {
        libc::signal(libc::SIGTERM, pass_on as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
}

impl Drop for CoreShield {
    fn drop(&mut self) {
        self.moved.iter().for_each(release);
    }
}

/// The online cores (`0..online`) that are not PMD cores.
fn cores_other_than(pmd_cores: &[usize], online: usize) -> libc::cpu_set_t {
    // SAFETY: a zeroed cpu_set_t is valid; every core set is below CPU_SETSIZE.
    let mut others: libc::cpu_set_t = unsafe { zeroed() };
    for c in (0..online.min(libc::CPU_SETSIZE as usize)).filter(|c| !pmd_cores.contains(c)) {
        unsafe { libc::CPU_SET(c, &mut others) };
    }
    others
}

/// Takes `pmd_cores` out of thread `tid`'s cores; a thread that may run only on PMD cores is
/// given `others`, the other online cores.
fn confine(tid: libc::pid_t, pmd_cores: &[usize], others: &libc::cpu_set_t) -> Confined {
    let Some(had) = affinity(tid) else { return Confined::Left };
    let mut given = had;
    let mut on_pmd = false;
    for &c in pmd_cores.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
        // SAFETY: the core is below CPU_SETSIZE, within the set.
        unsafe {
            on_pmd |= libc::CPU_ISSET(c, &had);
            libc::CPU_CLR(c, &mut given);
        }
    }
    if !on_pmd {
        return Confined::Left;
    }
    // SAFETY: CPU_COUNT reads valid sets.
    if unsafe { libc::CPU_COUNT(&given) } == 0 {
        if unsafe { libc::CPU_COUNT(others) } == 0 {
            return Confined::Left;
        }
        given = *others;
    }
    match set_affinity(tid, &given) {
        true => Confined::Moved(Box::new(Moved { tid, had, given })),
        false => Confined::Refused,
    }
}

/// Gives a confined thread its cores back, unless it chose others since (a thread that pinned
/// itself keeps its choice). A thread gone is not found.
fn release(m: &Moved) {
    // SAFETY: CPU_EQUAL compares two valid sets.
    if affinity(m.tid).is_some_and(|now| unsafe { libc::CPU_EQUAL(&now, &m.given) }) {
        set_affinity(m.tid, &m.had);
    }
}

/// Every thread id in `/proc`.
fn all_thread_ids() -> Vec<libc::pid_t> {
    let numbers = |dir: std::path::PathBuf| -> Vec<libc::pid_t> {
        std::fs::read_dir(dir)
            .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
            .unwrap_or_default()
    };
    numbers("/proc".into()).into_iter().flat_map(|pid| numbers(format!("/proc/{pid}/task").into())).collect()
}

fn affinity(tid: libc::pid_t) -> Option<libc::cpu_set_t> {
    // SAFETY: a zeroed cpu_set_t is valid, and the kernel writes at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = zeroed();
        (libc::sched_getaffinity(tid, size_of::<libc::cpu_set_t>(), &mut set) == 0).then_some(set)
    }
}

fn set_affinity(tid: libc::pid_t, set: &libc::cpu_set_t) -> bool {
    // SAFETY: the kernel reads a valid set of the size given.
    unsafe { libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), set) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_set(tid: libc::pid_t, core: usize) -> bool {
        // SAFETY: core 0 or 1, within the set.
        unsafe { libc::CPU_ISSET(core, &affinity(tid).unwrap()) }
    }

    #[test]
    fn a_thread_leaves_the_shielded_core_and_gets_its_cores_back() {
        let cores = slaswitch_datapath::pmd::online_cores();
        if cores < 2 {
            return; // one core: nowhere to move a thread to.
        }
        let (tell, told) = std::sync::mpsc::channel();
        let (done, finish) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            // SAFETY: gettid has no arguments and cannot fail.
            tell.send(unsafe { libc::gettid() }).unwrap();
            finish.recv().unwrap();
        });
        let tid = told.recv().unwrap();
        // SAFETY: a zeroed set is valid; the cores are below CPU_SETSIZE.
        let mut anywhere: libc::cpu_set_t = unsafe { zeroed() };
        (0..cores.min(64)).for_each(|c| unsafe { libc::CPU_SET(c, &mut anywhere) });
        assert!(set_affinity(tid, &anywhere));
        let others = cores_other_than(&[0], cores);
        let Confined::Moved(moved) = confine(tid, &[0], &others) else { panic!("not moved") };
        assert!(!is_set(tid, 0) && is_set(tid, 1), "still allowed on the shielded core");
        release(&moved);
        assert!(is_set(tid, 0), "its core not given back");
        // Allowed only on the shielded core (a set inherited from a sandbox's init): moved to
        // the others all the same, and given back.
        let mut only_zero: libc::cpu_set_t = unsafe { zeroed() };
        unsafe { libc::CPU_SET(0, &mut only_zero) };
        assert!(set_affinity(tid, &only_zero));
        let Confined::Moved(moved) = confine(tid, &[0], &others) else { panic!("not moved") };
        assert!(!is_set(tid, 0) && is_set(tid, 1), "still on the shielded core alone");
        release(&moved);
        assert!(is_set(tid, 0) && !is_set(tid, 1), "its one core not given back");
        // Nowhere else to go (every core a PMD core): left.
        assert!(matches!(confine(tid, &[0], &cores_other_than(&[0, 1], 2)), Confined::Left));
        done.send(()).unwrap();
        worker.join().unwrap();
    }
}
