//! slaswitchd's own options: a bad value is refused with the option named, before anything
//! starts (no root or hugepages needed).

use std::process::Command;

/// Each of `bad` given to `--OPTION` makes slaswitchd exit with status 1 and an error naming the
/// option; `--help` lists it.
fn refused_before_the_switch_starts(option: &str, bad: &[&str]) {
    for value in bad {
        let out =
            Command::new(env!("CARGO_BIN_EXE_slaswitchd")).args([&format!("--{option}"), *value]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{option} {value}: {err}");
        assert!(err.contains(option), "{option} {value}: {err}");
    }
    let help = Command::new(env!("CARGO_BIN_EXE_slaswitchd")).arg("--help").output().unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains(&format!("--{option}")));
}

#[test]
fn a_bucket_depth_out_of_range_is_refused_before_the_switch_starts() {
    refused_before_the_switch_starts("c2tb-bucket-us", &["0", "1000001", "deep"]);
}

#[test]
fn a_lower_class_burst_out_of_range_is_refused_before_the_switch_starts() {
    refused_before_the_switch_starts("lower-class-burst", &["0", "33", "short"]);
}

#[test]
fn an_idle_poll_interval_out_of_range_is_refused_before_the_switch_starts() {
    refused_before_the_switch_starts("idle-poll-us", &["1001", "1.5", "often"]);
}

#[test]
fn a_comparison_slice_out_of_range_is_refused_before_the_switch_starts() {
    refused_before_the_switch_starts("compare-slice-us", &["999", "10000001", "short"]);
}

#[test]
fn cluster_options_out_of_range_are_refused_before_the_switch_starts() {
    refused_before_the_switch_starts("lease-secs", &["1", "601", "long"]);
    refused_before_the_switch_starts("report-every", &["0", "3601", "often"]);
    refused_before_the_switch_starts("billing-cycle-ms", &["99", "3600001", "often"]);
    let out = Command::new(env!("CARGO_BIN_EXE_slaswitchd"))
        .args(["--etcd", "http://127.0.0.1:1", "--host-id", "bad name"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("host-id") && err.contains("host id 'bad name'"), "{err}");
}

#[test]
fn an_unknown_socket_group_is_refused_before_the_switch_starts() {
    refused_before_the_switch_starts("socket-group", &["no-such-group-here"]);
}
