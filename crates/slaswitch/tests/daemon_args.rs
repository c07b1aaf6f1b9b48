//! slaswitchd's own options: a bad value is refused with the option named, before anything
//! starts (no root or hugepages needed).

use std::process::Command;

#[test]
fn a_bucket_depth_out_of_range_is_refused_before_the_switch_starts() {
    for bad in ["0", "1000001", "deep"] {
        let out = Command::new(env!("CARGO_BIN_EXE_slaswitchd")).args(["--c2tb-bucket-us", bad]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{bad}: {err}");
        assert!(err.contains("c2tb-bucket-us"), "{bad}: {err}");
    }
    let help = Command::new(env!("CARGO_BIN_EXE_slaswitchd")).arg("--help").output().unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("--c2tb-bucket-us"));
}

#[test]
fn a_comparison_slice_out_of_range_is_refused_before_the_switch_starts() {
    for bad in ["999", "10000001", "short"] {
        let out = Command::new(env!("CARGO_BIN_EXE_slaswitchd")).args(["--compare-slice-us", bad]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{bad}: {err}");
        assert!(err.contains("compare-slice-us"), "{bad}: {err}");
    }
    let help = Command::new(env!("CARGO_BIN_EXE_slaswitchd")).arg("--help").output().unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("--compare-slice-us"));
}
