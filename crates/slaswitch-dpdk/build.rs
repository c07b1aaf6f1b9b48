//! Compiles the C shim (csrc/) against Debian's libdpdk-dev (22.11), found with pkg-config.

use std::process::Command;

fn pkg_config(args: &[&str]) -> String {
    let out = Command::new("pkg-config").args(args).arg("libdpdk").output().unwrap_or_else(|e| {
        panic!("pkg-config not runnable ({e}): install pkg-config and libdpdk-dev (scripts/install-deps)")
    });
    if !out.status.success() {
        panic!(
            "pkg-config cannot find libdpdk: install Debian's libdpdk-dev (scripts/install-deps).\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8(out.stdout).expect("pkg-config output is UTF-8")
}

fn main() {
    println!("cargo:rerun-if-changed=csrc");
    let version = pkg_config(&["--modversion"]);
    if !version.trim().starts_with("22.11") {
        println!("cargo:warning=built against DPDK {} (slaswitch targets 22.11)", version.trim());
    }
    let mut build = cc::Build::new();
    build.file("csrc/shim.c").file("csrc/vhost_rx.c").opt_level(3).warnings(true);
    let cflags = pkg_config(&["--cflags"]);
    let mut tokens = cflags.split_whitespace();
    while let Some(flag) = tokens.next() {
        if flag == "-include" {
            if let Some(file) = tokens.next() {
                build.flag("-include").flag(file);
            }
        } else {
            build.flag(flag);
        }
    }
    build.compile("slaswitch_dpdk_shim");
    // rte_vdev_init lives in the vdev bus driver, which pkg-config does not list.
    println!("cargo:rustc-link-lib=rte_bus_vdev");
    // The vhost port's own API (its guest's negotiated features) is not listed either.
    println!("cargo:rustc-link-lib=rte_net_vhost");
    for flag in pkg_config(&["--libs"]).split_whitespace() {
        if let Some(lib) = flag.strip_prefix("-l") {
            println!("cargo:rustc-link-lib={lib}");
        } else if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        } else if flag.starts_with("-Wl,") {
            println!("cargo:rustc-link-arg={flag}");
        }
    }
}
