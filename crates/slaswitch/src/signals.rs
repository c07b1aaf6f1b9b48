//! Ending a program's measurement early: SIGTERM and SIGINT set a flag its loop looks at, so it
//! stops as its end would and still reports what it has.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A flag SIGTERM and SIGINT set. A second signal while it is set ends the process at once, so
/// a loop that never looks at the flag cannot keep the process up.
pub fn stop_on_signals() -> std::io::Result<Arc<AtomicBool>> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [SIGINT, SIGTERM] {
        // Registered first, so it sees the flag as it was before this signal set it.
        signal_hook::flag::register_conditional_shutdown(signal, 130, Arc::clone(&stop))?;
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    Ok(stop)
}
