//! Everything a run creates is registered here as soon as it exists: processes (each in its own
//! process group, so its children go with it), kernel interfaces, namespaces, files and
//! undo-commands. [`undo_all`] removes them newest first; it runs at the end of every run, and
//! when SIGINT or SIGTERM arrives the runner stops at its next check and calls it too.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
enum Item {
    /// A process group leader and what it is.
    Process(i32, String),
    /// A command that undoes something (e.g. `ip link del X`).
    Undo(Vec<String>),
    Path(PathBuf),
}

static ITEMS: Mutex<Vec<Item>> = Mutex::new(Vec::new());
/// Set by SIGINT or SIGTERM; a second one while it is set ends the process at once.
static INTERRUPTED: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);

/// SIGINT and SIGTERM set a flag the runner checks between steps and samples. A second signal
/// means the runner did not get to its next check (it may be stuck outside the sampling loop):
/// the process then leaves at once (status 130) rather than ignore the user.
pub fn install_signal_handlers() -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    for signal in [SIGINT, SIGTERM] {
        // Registered first, so it sees the flag as it was before this signal set it.
        signal_hook::flag::register_conditional_shutdown(signal, 130, Arc::clone(&INTERRUPTED))?;
        signal_hook::flag::register(signal, Arc::clone(&INTERRUPTED))?;
    }
    Ok(())
}

/// True once Ctrl-C or SIGTERM asked the run to stop.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

fn push(item: Item) {
    ITEMS.lock().unwrap_or_else(|e| e.into_inner()).push(item);
}

/// A child started with `process_group(0)`.
pub fn process(pid: u32, what: &str) {
    push(Item::Process(pid as i32, what.to_string()));
}

/// Registers a command that undoes something the run did.
pub fn undo(cmd: &[&str]) {
    push(Item::Undo(cmd.iter().map(|s| s.to_string()).collect()));
}

/// Registers a file or folder to remove at cleanup.
pub fn path(p: PathBuf) {
    push(Item::Path(p));
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Reaps `pid` if it is our child and has exited.
fn reap(pid: i32) {
    let mut status = 0;
    // SAFETY: WNOHANG never blocks; a pid that is not our child just returns an error.
    unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
}

/// Stops a process group: SIGTERM, then SIGKILL after `grace`. Returns once every member
/// has gone, not only the leader: a program that reports when stopped (a meter) has then
/// written its output.
pub fn stop_group(pid: i32, grace: Duration) {
    // SAFETY: signals to a process group we created.
    unsafe { libc::kill(-pid, libc::SIGTERM) };
    let t = Instant::now();
    loop {
        reap(pid);
        if !alive(pid) && !alive(-pid) {
            break;
        }
        if t.elapsed() > grace {
            // SAFETY: as above.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            std::thread::sleep(Duration::from_millis(100));
            reap(pid);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Removes everything registered, newest first. Returns what it did, for the log.
pub fn undo_all() -> Vec<String> {
    let items: Vec<Item> = std::mem::take(&mut *ITEMS.lock().unwrap_or_else(|e| e.into_inner()));
    let mut done = Vec::new();
    for item in items.into_iter().rev() {
        match item {
            Item::Process(pid, what) => {
                reap(pid);
                if alive(pid) {
                    stop_group(pid, Duration::from_secs(5));
                    done.push(format!("stopped {what} (pid {pid})"));
                }
            }
            Item::Undo(cmd) => {
                let ok = std::process::Command::new(&cmd[0])
                    .args(&cmd[1..])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if ok {
                    done.push(cmd.join(" "));
                }
            }
            Item::Path(p) => {
                let removed =
                    if p.is_dir() { std::fs::remove_dir_all(&p).is_ok() } else { std::fs::remove_file(&p).is_ok() };
                if removed {
                    done.push(format!("removed {}", p.display()));
                }
            }
        }
    }
    done
}
