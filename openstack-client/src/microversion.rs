//! API microversions: parsing, comparing, and negotiating the version to
//! send from what the engine wants and what the server supports.

use std::fmt;
use std::str::FromStr;

/// A `MAJOR.MINOR` microversion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Microversion {
    pub major: u32,
    pub minor: u32,
}

impl Microversion {
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }
}

impl fmt::Display for Microversion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl FromStr for Microversion {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim().trim_start_matches('v');
        let (major, minor) = s
            .split_once('.')
            .ok_or_else(|| format!("{s:?} is not a MAJOR.MINOR microversion"))?;
        Ok(Self {
            major: major
                .parse()
                .map_err(|_| format!("{s:?} is not a MAJOR.MINOR microversion"))?,
            minor: minor
                .parse()
                .map_err(|_| format!("{s:?} is not a MAJOR.MINOR microversion"))?,
        })
    }
}

/// Nova: the newest version whose evacuation keeps the instance's state
/// (2.95 leaves evacuated instances stopped) and that has everything the
/// engine reads (host_status 2.16, locked_reason 2.73, migration paging
/// 2.59, BDM attachment ids 2.89).
pub const NOVA_PREFERRED: Microversion = Microversion::new(2, 94);
pub const NOVA_MIN: Microversion = Microversion::new(2, 1);
/// Cinder: the attachments API with `os-complete`, as Nova itself uses.
pub const CINDER_PREFERRED: Microversion = Microversion::new(3, 44);
pub const CINDER_MIN: Microversion = Microversion::new(3, 0);

/// The version to send: `wanted`, lowered to what the server supports.
/// `None` when the server's range and the engine's do not meet.
pub fn negotiate(
    wanted: Microversion,
    server_min: Microversion,
    server_max: Microversion,
) -> Option<Microversion> {
    let chosen = wanted.min(server_max);
    (chosen >= server_min).then_some(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_order() {
        let v: Microversion = "2.94".parse().unwrap();
        assert_eq!(v, NOVA_PREFERRED);
        assert!(Microversion::new(2, 9) < Microversion::new(2, 10));
        assert!("2".parse::<Microversion>().is_err());
        assert!("two.one".parse::<Microversion>().is_err());
        assert_eq!(
            "v3.71".parse::<Microversion>().unwrap(),
            Microversion::new(3, 71)
        );
    }

    #[test]
    fn negotiation_lowers_to_the_server_maximum() {
        let v = |s: &str| s.parse::<Microversion>().unwrap();
        assert_eq!(negotiate(v("2.94"), v("2.1"), v("2.104")), Some(v("2.94")));
        assert_eq!(negotiate(v("2.94"), v("2.1"), v("2.60")), Some(v("2.60")));
        assert_eq!(negotiate(v("2.94"), v("2.96"), v("2.104")), None);
    }
}
