//! Where to evacuate, by recovery method: the scheduler's choice (`auto`),
//! the segment's reserved hosts in order, or one then the other.

use std::fmt;

pub use instanceha_proto::model::RecoveryMethod;

/// One place to try.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// Let Nova's scheduler pick.
    Scheduler,
    /// A reserved host, enabled for the purpose.
    ReservedHost(String),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Scheduler => f.write_str("a host the scheduler picks"),
            Self::ReservedHost(host) => write!(f, "reserved host {host}"),
        }
    }
}

impl Target {
    pub fn host(&self) -> Option<&str> {
        match self {
            Self::Scheduler => None,
            Self::ReservedHost(host) => Some(host),
        }
    }
}

/// Why there is nowhere to evacuate to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "recovery method reserved_host needs a reserved host, and segment has none that is not on maintenance"
)]
pub struct NoReservedHost;

/// Where an instance needing a device may go: the segment's reserved
/// hosts (not on maintenance) that are in the device aggregate, in the
/// segment's order, without the failed host; none is a failure of that
/// instance, said before anything is asked of Nova.
pub fn device_targets(
    reserved_hosts: &[String],
    aggregate_hosts: &[String],
    failed_host: &str,
) -> Vec<Target> {
    reserved_hosts
        .iter()
        .filter(|h| h.as_str() != failed_host && aggregate_hosts.contains(h))
        .map(|h| Target::ReservedHost(h.clone()))
        .collect()
}

/// The targets to try in order for `method`, given the segment's reserved
/// hosts (already filtered: reserved and not on maintenance), without the
/// failed host itself.
pub fn targets(
    method: RecoveryMethod,
    reserved_hosts: &[String],
    failed_host: &str,
) -> Result<Vec<Target>, NoReservedHost> {
    let reserved: Vec<Target> = reserved_hosts
        .iter()
        .filter(|h| h.as_str() != failed_host)
        .map(|h| Target::ReservedHost(h.clone()))
        .collect();
    Ok(match method {
        RecoveryMethod::Auto => vec![Target::Scheduler],
        RecoveryMethod::ReservedHost => {
            if reserved.is_empty() {
                return Err(NoReservedHost);
            }
            reserved
        }
        RecoveryMethod::AutoPriority => {
            let mut all = vec![Target::Scheduler];
            all.extend(reserved);
            all
        }
        RecoveryMethod::RhPriority => {
            let mut all = reserved;
            all.push(Target::Scheduler);
            all
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_method() {
        let reserved = hosts(&["spare-1", "spare-2"]);
        assert_eq!(
            targets(RecoveryMethod::Auto, &reserved, "c1").unwrap(),
            vec![Target::Scheduler]
        );
        assert_eq!(
            targets(RecoveryMethod::ReservedHost, &reserved, "c1").unwrap(),
            vec![
                Target::ReservedHost("spare-1".into()),
                Target::ReservedHost("spare-2".into())
            ]
        );
        assert_eq!(
            targets(RecoveryMethod::AutoPriority, &reserved, "c1").unwrap()[0],
            Target::Scheduler
        );
        let rh = targets(RecoveryMethod::RhPriority, &reserved, "c1").unwrap();
        assert_eq!(rh.last(), Some(&Target::Scheduler));
        assert_eq!(rh.len(), 3);
    }

    #[test]
    fn reserved_host_without_spares_fails_and_the_failed_host_is_never_a_target() {
        assert_eq!(
            targets(RecoveryMethod::ReservedHost, &[], "c1"),
            Err(NoReservedHost)
        );
        assert_eq!(
            targets(RecoveryMethod::ReservedHost, &hosts(&["c1"]), "c1"),
            Err(NoReservedHost)
        );
        // The priority methods still have the scheduler.
        assert_eq!(
            targets(RecoveryMethod::RhPriority, &[], "c1").unwrap(),
            vec![Target::Scheduler]
        );
    }

    #[test]
    fn a_device_goes_only_to_reserved_hosts_of_the_aggregate() {
        let reserved = hosts(&["spare-1", "gpu-2", "gpu-1"]);
        let aggregate = hosts(&["gpu-1", "gpu-2", "gpu-3", "failed"]);
        assert_eq!(
            device_targets(&reserved, &aggregate, "failed"),
            [
                Target::ReservedHost("gpu-2".into()),
                Target::ReservedHost("gpu-1".into())
            ]
        );
        assert!(device_targets(&hosts(&["spare-1"]), &aggregate, "failed").is_empty());
        assert!(device_targets(&hosts(&["failed"]), &aggregate, "failed").is_empty());
    }
}
