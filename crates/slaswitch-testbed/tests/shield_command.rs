//! `slaswitch experiment shield --pmd-cores C -- COMMAND`: the benchmark scripts' shield. The
//! command runs off the PMD cores and learns how many threads were moved, its exit status is
//! the shield's, and bad cores are refused by name before anything moves.

use std::process::Command;

fn shield() -> Command {
    Command::new(env!("CARGO_BIN_EXE_slaswitch-experiment"))
}

fn online_cores() -> usize {
    slaswitch_datapath::pmd::online_cores()
}

/// The cores in a `Cpus_allowed_list` line ("0-1", "1", "0,2-3").
fn cores_of(list: &str) -> Vec<usize> {
    list.trim()
        .split(',')
        .flat_map(|range| match range.split_once('-') {
            Some((a, b)) => (a.parse().unwrap()..=b.parse().unwrap()).collect::<Vec<usize>>(),
            None => vec![range.parse().unwrap()],
        })
        .collect()
}

fn own_cores() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Cpus_allowed_list:")).unwrap();
    cores_of(line.trim_start_matches("Cpus_allowed_list:"))
}

#[test]
fn the_command_runs_off_the_pmd_core_and_its_exit_status_is_kept() {
    if online_cores() < 2 {
        let out = shield().args(["shield", "--pmd-cores", "0", "--", "true"]).output().unwrap();
        assert!(!out.status.success(), "one core: nothing may stay for the rest");
        return;
    }
    let before = own_cores();
    let script = "grep Cpus_allowed_list /proc/self/status; echo moved=$SLASWITCH_SHIELDED_THREADS; exit 3";
    let out = shield().args(["shield", "--pmd-cores", "0", "--", "sh", "-c", script]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let allowed = stdout.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("the command's cores");
    assert!(!cores_of(allowed).contains(&0), "the command ran on the PMD core: {allowed}");
    let moved: usize = stdout.lines().find_map(|l| l.strip_prefix("moved=")).unwrap().parse().unwrap();
    assert!(moved >= 1, "at least the shield's own thread moved: {stdout}");
    assert_eq!(own_cores(), before, "this test's own cores given back");
}

#[test]
fn bad_cores_are_refused_by_name() {
    let last = online_cores() - 1;
    let out = shield().args(["shield", "--pmd-cores", &(last + 1).to_string(), "--", "true"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!("--pmd-cores {}", last + 1)) && stderr.contains(&format!("0 to {last}")),
        "{stderr}"
    );

    let every = (0..=last).map(|c| c.to_string()).collect::<Vec<_>>().join(",");
    let out = shield().args(["shield", "--pmd-cores", &every, "--", "true"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("every core of this machine"), "{stderr}");
}
