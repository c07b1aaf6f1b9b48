//! slaswitch-tenant: an emulated VM (or many) attached over vhost-user the way a VM's virtio-net
//! is: a DPDK virtio-user device per VM. It stands in for the seeds' VMs and pkt-gen.

pub mod generator;
pub mod run_for;
pub mod sink;

pub use slaswitch_traffic::{frames, phase};

/// Parses a virtio ring's size as `--ring` takes it: a power of two from 64 to 32768
/// descriptors (what DPDK's virtio-user accepts).
pub fn parse_ring_descriptors(s: &str) -> Result<u16, String> {
    match s.parse::<u16>() {
        Ok(n) if (64..=32768).contains(&n) && n.is_power_of_two() => Ok(n),
        _ => Err(format!("'{s}' is not a power of two from 64 to 32768")),
    }
}

/// How a virtio-user VM lays out its rings (`--virtio-ring`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum VirtioRing {
    /// QEMU's default layout.
    Split,
    /// Packed ring, in-order completion, no mergeable buffers: the fastest layout DPDK's vhost
    /// library serves, so one generator core can keep a PMD busy.
    Packed,
}

impl VirtioRing {
    /// The virtio-user device arguments that select it.
    pub fn vdev_args(self) -> &'static str {
        match self {
            VirtioRing::Split => "",
            VirtioRing::Packed => ",packed_vq=1,in_order=1,mrg_rxbuf=0",
        }
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            VirtioRing::Split => "split",
            VirtioRing::Packed => "packed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_ring_descriptors, VirtioRing};
    use clap::ValueEnum;

    #[test]
    fn a_ring_is_a_power_of_two_from_64_to_32768_descriptors() {
        assert_eq!(parse_ring_descriptors("256"), Ok(256));
        assert_eq!(parse_ring_descriptors("32768"), Ok(32768));
        for bad in ["1000", "32", "65536", "-1", "big"] {
            let e = parse_ring_descriptors(bad).unwrap_err();
            assert!(e.contains(bad) && e.contains("power of two from 64 to 32768"), "{e}");
        }
    }

    #[test]
    fn a_layout_is_named_on_the_command_line_as_clap_parses_it() {
        for layout in VirtioRing::value_variants() {
            assert_eq!(VirtioRing::from_str(layout.name(), false), Ok(*layout));
        }
    }
}
