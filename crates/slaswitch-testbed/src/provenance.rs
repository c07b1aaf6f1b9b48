//! What a report says about where its figures come from: the host (CPU model, cores, TSC rate,
//! kernel, DPDK), the commit of the build that ran, and commands without this machine's paths,
//! so a reader can tell which build and which host a figure belongs to and rerun it elsewhere.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The host, for run.json and the report.
pub fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown".into(), |(_, m)| m.trim().to_string());
    json!({
        "cpu": model,
        // The machine's, not this process's: the test bed pins itself to the VM core.
        "cores": cpuinfo.lines().filter(|l| l.starts_with("processor")).count().max(1),
        "tsc_hz": measured_tsc_hz(),
        "kernel": command_output("uname", &["-r"]),
        "dpdk": command_output("pkg-config", &["--modversion", "libdpdk"]),
        "memory": command_output("sh", &["-c", "free -g | awk '/Mem:/ {print $2 \" GiB\"}'"]),
    })
}

/// The TSC's rate over 200 ms of wall-clock time: the unit of every cycle figure the report
/// gives, which differs between hosts that name the same CPU family.
fn measured_tsc_hz() -> u64 {
    let (t0, c0) = (Instant::now(), slaswitch_dpdk::rdtsc());
    std::thread::sleep(Duration::from_millis(200));
    let cycles = slaswitch_dpdk::rdtsc().wrapping_sub(c0);
    (cycles as f64 / t0.elapsed().as_secs_f64()) as u64
}

/// The commit of the checkout this test bed runs from (the one its binary was built in), and
/// whether tracked files had changes; "unknown" outside a git checkout.
pub fn commit() -> String {
    let dir = std::env::current_exe().ok().and_then(|p| p.parent().map(|d| d.to_path_buf())).unwrap_or_default();
    let git =
        |args: &[&str]| Command::new("git").arg("-C").arg(&dir).args(args).output().ok().filter(|o| o.status.success());
    let Some(head) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown (not run from a git checkout)".into();
    };
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|o| !o.stdout.is_empty());
    if dirty {
        format!("{head} with uncommitted changes")
    } else {
        head
    }
}

/// The report's host line: CPU model, cores, TSC, memory, kernel and DPDK.
pub fn host_line(machine: &Value) -> String {
    let text = |k: &str| machine[k].as_str().unwrap_or("?").to_string();
    let tsc = machine["tsc_hz"].as_u64().map_or("TSC ?".into(), |hz| format!("TSC {:.2} GHz", hz as f64 / 1e9));
    format!(
        "{}, {} cores, {tsc}, {}, kernel {}, DPDK {}",
        text("cpu"),
        machine["cores"],
        text("memory"),
        text("kernel"),
        text("dpdk")
    )
}

/// `line` with this machine's paths taken out: programs of the build by name alone, and the
/// run's scratch folder as `$RUN`.
pub fn portable(line: &str) -> String {
    line.split(' ').map(portable_word).collect::<Vec<_>>().join(" ")
}

/// The run's command as a reader would type it: the output folder, a path of this machine, as
/// `DIR`.
pub fn rerun_command(command: &str) -> String {
    let words: Vec<&str> = command.split(' ').collect();
    let mut out = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        out.push(portable_word(words[i]));
        if words[i] == "--out" && i + 1 < words.len() {
            out.push("DIR".into());
            i += 1;
        }
        i += 1;
    }
    out.join(" ")
}

fn portable_word(word: &str) -> String {
    // A program of the build: `<anything>/target/<profile>/<program>`, whatever the profile.
    let path = std::path::Path::new(word);
    let in_target = path.parent().and_then(|profile| profile.parent()).is_some_and(|t| t.ends_with("target"));
    if word.starts_with('/') && in_target {
        return word.rsplit('/').next().unwrap_or(word).to_string();
    }
    let marker = "/slaswitch-exp-";
    let Some(at) = word.find(marker) else {
        return word.to_string();
    };
    let start = word[..at].rfind(|c: char| !(c.is_alphanumeric() || "/_-.".contains(c))).map_or(0, |i| i + 1);
    let digits = word[at + marker.len()..].bytes().take_while(u8::is_ascii_digit).count();
    let end = at + marker.len() + digits;
    format!("{}$RUN{}", &word[..start], portable_word(&word[end..]))
}

/// The trimmed standard output of a command; empty if it cannot run.
pub(crate) fn command_output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_lose_this_machines_paths() {
        assert_eq!(
            portable(
                "/work/main/target/release/slaswitch --socket /tmp/slaswitch-exp-12606/s-1/slaswitchd.ctl add-port vm1"
            ),
            "slaswitch --socket $RUN/s-1/slaswitchd.ctl add-port vm1"
        );
        assert_eq!(portable("/w/target/ci/slaswitch-tenant idle"), "slaswitch-tenant idle");
        assert_eq!(portable("--out=/tmp/slaswitch-exp-7/t.json x"), "--out=$RUN/t.json x");
        assert_eq!(portable("ovs-vsctl add-br br0"), "ovs-vsctl add-br br0");
        assert_eq!(
            rerun_command("slaswitch experiment run e/x.toml --switch slaswitch --rounds 2 --out /tmp/r/x"),
            "slaswitch experiment run e/x.toml --switch slaswitch --rounds 2 --out DIR"
        );
    }

    #[test]
    fn the_host_line_names_the_tsc() {
        let m = json!({"cpu": "AMD EPYC", "cores": 2, "tsc_hz": 2_600_000_000u64, "memory": "23 GiB", "kernel": "6.1", "dpdk": "22.11"});
        assert_eq!(host_line(&m), "AMD EPYC, 2 cores, TSC 2.60 GHz, 23 GiB, kernel 6.1, DPDK 22.11");
    }
}
