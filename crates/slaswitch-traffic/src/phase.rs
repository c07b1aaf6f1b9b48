//! Traffic phases: when a VM sends, what and how fast.
//! Text form: `start=0,dur=10,size=64,rate=1mpps,flows=1,dst-mac=02:..,dst-ip=10.0.0.2,vm=vm1`
//! (`size` a frame length in bytes without FCS, or `imix`; `rate` as `NNpps`, `NNkpps`, `NNmpps`,
//! `NNbps`, `NNkbps`, `NNmbps`, `NNgbps` of frame bytes, or `max`; `vm` omitted: every VM).
//! `malformed=runt|truncated-vlan|truncated-ipv4|bad-ihl|bad-version|bad-length|truncated-ipv6|truncated-l4`
//! sends frames the switch must refuse (a hostile
//! VM). `burst=1ms/4ms` makes a paced phase bursty: each 4 ms period's frames go out in its first
//! 1 ms, so the mean rate is still `rate` but the VM's ring sees four times it while on.

use serde::{Deserialize, Serialize};

use crate::SpecError;

/// Frame sizes a phase sends.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Size {
    /// Every frame this many bytes (without FCS).
    Fixed(u16),
    /// Simple IMIX: 7 x 60, 4 x 590, 1 x 1514 bytes (64/594/1518 with FCS).
    Imix,
}

/// The order simple IMIX sends its sizes in, bytes without FCS.
pub const IMIX_PATTERN: [u16; 12] = [60, 60, 60, 60, 60, 60, 60, 590, 590, 590, 590, 1514];

impl Size {
    /// The mean frame length, bytes without FCS.
    pub fn mean_bytes(&self) -> f64 {
        match self {
            Size::Fixed(s) => f64::from(*s),
            Size::Imix => IMIX_PATTERN.iter().map(|&s| f64::from(s)).sum::<f64>() / IMIX_PATTERN.len() as f64,
        }
    }
}

/// How fast a phase sends.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Rate {
    /// Packets per second.
    Pps(f64),
    /// Bits per second of frames.
    Bps(f64),
    /// As fast as the ring takes frames.
    Max,
}

/// A stretch of time in which a VM sends frames of one kind at one rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// When it starts, seconds after the run's start.
    pub start_secs: f64,
    /// How long it lasts.
    pub duration_secs: f64,
    /// The frames' sizes.
    pub size: Size,
    /// How fast.
    pub rate: Rate,
    /// Distinct flows (UDP source ports) the frames cycle through.
    pub flows: u32,
    /// Destination MAC of every frame.
    pub dst_mac: [u8; 6],
    /// Destination IPv4 address of every frame.
    pub dst_ip: [u8; 4],
    /// The VM that sends this phase; `None`: every VM.
    pub vm: Option<String>,
    /// On/off sending at the same mean rate; `None`: evenly paced.
    #[serde(default)]
    pub burst: Option<Burst>,
    /// Frames the switch's parser must refuse, of this kind (a hostile VM); `None`: valid.
    #[serde(default)]
    pub malformed: Option<crate::frames::Malformed>,
}

/// On/off arrivals: every `period_secs`, the period's frames are sent during its first `on_secs`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Burst {
    /// How long the VM sends in each period.
    pub on_secs: f64,
    /// The period.
    pub period_secs: f64,
}

impl Burst {
    /// Seconds of even pacing that are due `elapsed_secs` into the phase: a whole period's worth
    /// for each period begun, reached at `on_secs` into it.
    pub fn paced_secs(&self, elapsed_secs: f64) -> f64 {
        let periods = (elapsed_secs / self.period_secs).floor();
        let within = elapsed_secs - periods * self.period_secs;
        periods * self.period_secs + (within * self.period_secs / self.on_secs).min(self.period_secs)
    }
}

impl Phase {
    /// Packets per second this phase asks for (`None`: as fast as possible).
    pub fn target_pps(&self) -> Option<f64> {
        match self.rate {
            Rate::Pps(p) => Some(p),
            Rate::Bps(b) => Some(b / 8.0 / self.size.mean_bytes()),
            Rate::Max => None,
        }
    }

    /// Packets due `elapsed_secs` into the phase (`None`: as fast as possible).
    pub fn due_packets(&self, elapsed_secs: f64) -> Option<u64> {
        let paced_secs = self.burst.map_or(elapsed_secs, |b| b.paced_secs(elapsed_secs));
        self.target_pps().map(|pps| (paced_secs * pps) as u64)
    }

    /// When it ends, seconds after the run's start.
    pub fn end_secs(&self) -> f64 {
        self.start_secs + self.duration_secs
    }
}

/// Parses `02:5a:00:00:00:01`.
pub fn parse_mac(s: &str) -> Result<[u8; 6], SpecError> {
    let parts: Vec<u8> = s
        .split(':')
        .map(|p| u8::from_str_radix(p, 16))
        .collect::<Result<_, _>>()
        .map_err(|_| SpecError::new(format!("'{s}'"), "not a MAC address"))?;
    parts.try_into().map_err(|_| SpecError::new(format!("'{s}'"), "not a MAC address"))
}

fn parse_rate(s: &str) -> Result<Rate, SpecError> {
    if s == "max" {
        return Ok(Rate::Max);
    }
    let lower = s.to_ascii_lowercase();
    let units: [(&str, f64, bool); 8] = [
        ("mpps", 1e6, true),
        ("kpps", 1e3, true),
        ("pps", 1.0, true),
        ("gbps", 1e9, false),
        ("mbps", 1e6, false),
        ("kbps", 1e3, false),
        ("bps", 1.0, false),
        ("", 1.0, true),
    ];
    for (suffix, scale, pps) in units {
        if let Some(num) = lower.strip_suffix(suffix) {
            if let Ok(v) = num.parse::<f64>() {
                if v <= 0.0 || !v.is_finite() {
                    return Err(SpecError::new(format!("rate '{s}'"), "must be positive"));
                }
                return Ok(if pps { Rate::Pps(v * scale) } else { Rate::Bps(v * scale) });
            }
        }
    }
    Err(SpecError::new(format!("rate '{s}'"), "use e.g. 1mpps, 500kpps, 2gbps, 800mbps or max"))
}

impl std::str::FromStr for Phase {
    type Err = SpecError;
    fn from_str(spec: &str) -> Result<Phase, SpecError> {
        let mut p = Phase {
            start_secs: 0.0,
            duration_secs: f64::INFINITY,
            size: Size::Fixed(64),
            rate: Rate::Max,
            flows: 1,
            dst_mac: [0xff; 6],
            dst_ip: [10, 255, 255, 254],
            vm: None,
            burst: None,
            malformed: None,
        };
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) =
                item.split_once('=').ok_or_else(|| SpecError::new(format!("phase item '{item}'"), "not key=value"))?;
            let num = |v: &str| v.parse::<f64>().map_err(|_| SpecError::new(format!("{k}={v}"), "not a number"));
            match k {
                "start" => p.start_secs = num(v)?,
                "dur" | "duration" => p.duration_secs = num(v)?,
                "size" => {
                    p.size = if v == "imix" {
                        Size::Imix
                    } else {
                        let s: u16 =
                            v.parse().map_err(|_| SpecError::new(format!("size={v}"), "a frame length or imix"))?;
                        if !(60..=1514).contains(&s) {
                            return Err(SpecError::new(
                                format!("size={s}"),
                                "frames are 60 to 1514 bytes (without FCS)",
                            ));
                        }
                        Size::Fixed(s)
                    }
                }
                "rate" => p.rate = parse_rate(v)?,
                "flows" => {
                    p.flows = v
                        .parse()
                        .ok()
                        .filter(|&f| f >= 1)
                        .ok_or_else(|| SpecError::new(format!("flows={v}"), "at least 1"))?;
                }
                "dst-mac" => p.dst_mac = parse_mac(v)?,
                "dst-ip" => {
                    let ip: std::net::Ipv4Addr =
                        v.parse().map_err(|_| SpecError::new(format!("dst-ip={v}"), "not an IPv4 address"))?;
                    p.dst_ip = ip.octets();
                }
                "vm" => p.vm = Some(v.to_string()),
                "burst" => p.burst = Some(parse_burst(v)?),
                "malformed" => p.malformed = Some(crate::frames::Malformed::parse(v)?),
                other => {
                    return Err(SpecError::new(
                        format!("unknown phase key '{other}'"),
                        "start, dur, size, rate, flows, dst-mac, dst-ip, vm, burst or malformed",
                    ))
                }
            }
        }
        if p.start_secs < 0.0 || p.duration_secs <= 0.0 {
            return Err(SpecError::new(format!("phase '{spec}'"), "start must be >= 0 and dur > 0"));
        }
        if p.burst.is_some() && p.rate == Rate::Max {
            return Err(SpecError::new(
                format!("phase '{spec}'"),
                "burst needs a rate (a phase at rate=max has no pace to bunch)",
            ));
        }
        Ok(p)
    }
}

/// Parses `ON/PERIOD`, each `NNms` or `NNus`, with 0 < ON <= PERIOD.
fn parse_burst(v: &str) -> Result<Burst, SpecError> {
    let secs = |s: &str| -> Option<f64> {
        let (num, scale) = match s {
            _ if s.ends_with("ms") => (&s[..s.len() - 2], 1e-3),
            _ if s.ends_with("us") => (&s[..s.len() - 2], 1e-6),
            _ => return None,
        };
        num.parse::<f64>().ok().filter(|x| x.is_finite() && *x > 0.0).map(|x| x * scale)
    };
    let usage =
        || SpecError::new(format!("burst={v}"), "ON/PERIOD in ms or us, ON no longer than PERIOD (e.g. burst=1ms/4ms)");
    let (on, period) = v.split_once('/').ok_or_else(usage)?;
    match (secs(on), secs(period)) {
        (Some(on_secs), Some(period_secs)) if on_secs <= period_secs => Ok(Burst { on_secs, period_secs }),
        _ => Err(usage()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bursty_phase_sends_each_period_s_frames_while_on_at_the_same_mean() {
        let p: Phase = "rate=1000pps,burst=1ms/4ms".parse().unwrap();
        assert_eq!(p.burst, Some(Burst { on_secs: 1e-3, period_secs: 4e-3 }));
        // Half-way through the on-time, half the period's 4 frames are due; after it, all of them.
        assert_eq!(p.due_packets(0.0005), Some(2));
        assert_eq!(p.due_packets(0.002), Some(4));
        assert_eq!(p.due_packets(0.0039), Some(4));
        // The mean over whole periods is the rate.
        assert_eq!(p.due_packets(1.0), Some(1000));
        let even: Phase = "rate=1000pps".parse().unwrap();
        assert_eq!(even.due_packets(0.0005), Some(0));
        assert_eq!(even.due_packets(1.0), Some(1000));
    }

    #[test]
    fn a_burst_must_fit_its_period_and_needs_a_rate() {
        for bad in ["rate=1mpps,burst=4ms/1ms", "rate=1mpps,burst=1ms", "rate=1mpps,burst=0ms/1ms", "burst=1ms/4ms"] {
            assert!(bad.parse::<Phase>().is_err(), "{bad} accepted");
        }
        assert!("rate=1mpps,burst=250us/1ms".parse::<Phase>().is_ok());
    }
}
