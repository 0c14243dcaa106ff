//! The instance monitor: libvirt domain events become `VM` reports, mapped
//! as masakari-instancemonitor's event filter table does (the events it
//! reports, with the same `event` and `vir_domain_event` names).
//!
//! Events come from an [`EventSource`]. The one shipped reads libvirt's
//! own client, `virsh event --all --loop`, rather than binding libvirt's C
//! library: a binding would make every build of the workspace need
//! libvirt's headers and clang, for one optional monitor. The mapping and
//! the parsing of virsh's lines are pure and tested with recorded lines.

use std::future::Future;
use std::process::Stdio;

use chrono::Utc;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use crate::config::InstanceSettings;
use crate::metrics::Metrics;
use crate::report::Report;
use crate::spool::Spool;

/// A libvirt domain event, as libvirt names its parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DomainEvent {
    /// `VIR_DOMAIN_EVENT_ID_LIFECYCLE`: an event and its detail, as virsh
    /// prints them ("Stopped", "Failed").
    Lifecycle {
        event: String,
        detail: String,
    },
    Reboot,
    /// The watchdog's action ("poweroff", ...).
    Watchdog {
        action: String,
    },
    /// The I/O error's action ("none", "pause", "report").
    IoError {
        action: String,
    },
    IoErrorReason,
    ControlError,
}

/// One event of one domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub domain: String,
    pub event: DomainEvent,
}

/// masakari-instancemonitor's `(event, vir_domain_event)` for an event,
/// or `None` when it does not report it.
pub fn map(event: &DomainEvent) -> Option<(&'static str, &'static str)> {
    match event {
        DomainEvent::Lifecycle { event, detail } => {
            let detail = match (event.as_str(), detail.as_str()) {
                ("Suspended", "I/O Error") => "SUSPENDED_IOERROR",
                ("Suspended", "Watchdog") => "SUSPENDED_WATCHDOG",
                ("Suspended", "API error") => "SUSPENDED_API_ERROR",
                ("Stopped", "Shutdown") => "STOPPED_SHUTDOWN",
                ("Stopped", "Destroyed") => "STOPPED_DESTROYED",
                ("Stopped", "Failed") => "STOPPED_FAILED",
                ("Shutdown", "Finished") => "SHUTDOWN_FINISHED",
                _ => return None,
            };
            Some(("LIFECYCLE", detail))
        }
        DomainEvent::Reboot => Some(("REBOOT", "UNKNOWN")),
        DomainEvent::Watchdog { action } => {
            let detail = match action.as_str() {
                "none" => "WATCHDOG_NONE",
                "pause" => "WATCHDOG_PAUSE",
                "reset" => "WATCHDOG_RESET",
                "poweroff" => "WATCHDOG_POWEROFF",
                "shutdown" => "WATCHDOG_SHUTDOWN",
                "debug" => "WATCHDOG_DEBUG",
                _ => return None,
            };
            Some(("WATCHDOG", detail))
        }
        DomainEvent::IoError { action } => {
            let detail = match action.as_str() {
                "none" => "IO_ERROR_NONE",
                "pause" => "IO_ERROR_PAUSE",
                "report" => "IO_ERROR_REPORT",
                _ => return None,
            };
            Some(("IO_ERROR", detail))
        }
        DomainEvent::IoErrorReason => Some(("IO_ERROR_REASON", "UNKNOWN")),
        DomainEvent::ControlError => Some(("CONTROL_ERROR", "UNKNOWN")),
    }
}

/// Parses one line of `virsh event --loop` (with or without
/// `--timestamp`): `event 'lifecycle' for domain 'vm': Stopped Failed`.
pub fn parse_virsh_line(line: &str) -> Option<Observed> {
    let start = line.find("event '")?;
    let rest = &line[start + "event '".len()..];
    let (kind, rest) = rest.split_once('\'')?;
    let rest = rest.strip_prefix(" for domain '")?;
    let (domain, rest) = rest.rsplit_once('\'')?;
    let detail = rest.strip_prefix(':').map(str::trim).unwrap_or("");
    let last_word = || detail.split_whitespace().last().unwrap_or("").to_owned();
    let event = match kind {
        "lifecycle" => {
            let (event, detail) = detail.split_once(' ').unwrap_or((detail, ""));
            DomainEvent::Lifecycle {
                event: event.to_owned(),
                detail: detail.trim().to_owned(),
            }
        }
        "reboot" => DomainEvent::Reboot,
        "watchdog" => DomainEvent::Watchdog {
            action: last_word(),
        },
        "io-error" => DomainEvent::IoError {
            action: last_word(),
        },
        "io-error-reason" => DomainEvent::IoErrorReason,
        "control-error" => DomainEvent::ControlError,
        _ => return None,
    };
    Some(Observed {
        domain: domain.to_owned(),
        event,
    })
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot run {0}: {1}")]
    Spawn(String, std::io::Error),
    #[error("the event source ended")]
    Ended,
}

/// Where domain events come from (libvirt through virsh; recorded events
/// in tests).
pub trait EventSource: Send {
    /// The next event.
    fn next(&mut self) -> impl Future<Output = Result<Observed, Error>> + Send;
    /// The instance (Nova server) UUID of a domain.
    fn uuid(&mut self, domain: &str) -> impl Future<Output = Option<String>> + Send;
}

/// `virsh -c URI event --all --loop`.
pub struct Virsh {
    virsh: String,
    uri: String,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    _child: tokio::process::Child,
}

impl Virsh {
    pub fn spawn(settings: &InstanceSettings) -> Result<Self, Error> {
        let mut child = Command::new(&settings.virsh)
            .args([
                "-c",
                &settings.uri,
                "event",
                "--all",
                "--loop",
                "--timestamp",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Error::Spawn(settings.virsh.clone(), e))?;
        let stdout = child.stdout.take().ok_or(Error::Ended)?;
        Ok(Self {
            virsh: settings.virsh.clone(),
            uri: settings.uri.clone(),
            lines: BufReader::new(stdout).lines(),
            _child: child,
        })
    }
}

impl EventSource for Virsh {
    async fn next(&mut self) -> Result<Observed, Error> {
        loop {
            match self.lines.next_line().await {
                Ok(Some(line)) => {
                    if let Some(observed) = parse_virsh_line(&line) {
                        return Ok(observed);
                    }
                }
                Ok(None) | Err(_) => return Err(Error::Ended),
            }
        }
    }

    async fn uuid(&mut self, domain: &str) -> Option<String> {
        let output = Command::new(&self.virsh)
            .args(["-c", &self.uri, "domuuid", domain])
            .stdin(Stdio::null())
            .output()
            .await
            .ok()?;
        let uuid = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        (output.status.success() && !uuid.is_empty()).then_some(uuid)
    }
}

/// Reports the events of `source` until it ends or `shutdown`.
pub async fn watch<S: EventSource>(
    mut source: S,
    hostname: &str,
    spool: &Spool,
    metrics: &Metrics,
    shutdown: &CancellationToken,
) -> Result<(), Error> {
    loop {
        let observed = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            e = source.next() => e?,
        };
        let Some((event, detail)) = map(&observed.event) else {
            tracing::debug!(domain = %observed.domain, event = ?observed.event, "domain event not reported");
            continue;
        };
        let Some(uuid) = source.uuid(&observed.domain).await else {
            tracing::warn!(domain = %observed.domain, event, detail, "no uuid for the domain: event not reported");
            continue;
        };
        metrics.detection("vm");
        tracing::warn!(domain = %observed.domain, instance = %uuid, event, detail, "instance event: reporting it");
        let span =
            tracing::info_span!(parent: None, "instance event", instance = %uuid, event, detail);
        let traceparent = {
            let _e = span.enter();
            instanceha_runtime::propagation::current_traceparent()
        };
        let now = Utc::now();
        let report = Report::vm(
            hostname,
            &uuid,
            event,
            detail,
            &now.timestamp_micros().to_string(),
            now,
        );
        if let Err(e) = spool.push(report, traceparent).await {
            tracing::error!(error = %e, "cannot spool the report");
        }
    }
}

/// Runs the virsh source, restarting it (as masakari-instancemonitor
/// reconnects) until `shutdown`.
pub async fn run(
    settings: InstanceSettings,
    hostname: String,
    spool: Spool,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    loop {
        match Virsh::spawn(&settings) {
            Ok(source) => {
                tracing::info!(uri = %settings.uri, "reading libvirt domain events");
                if let Err(e) = watch(source, &hostname, &spool, &metrics, &shutdown).await {
                    tracing::warn!(error = %e, "libvirt events stopped; reconnecting");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read libvirt events; retrying"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(std::time::Duration::from_secs(3)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// Lines as `virsh event --all --loop --timestamp` prints them
    /// (libvirt's tools/virsh-domain-event.c formats).
    const RECORDED: &[&str] = &[
        "2026-12-02 10:00:00.100+0000: event 'lifecycle' for domain 'instance-00000001': Started Booted",
        "2026-12-02 10:00:01.200+0000: event 'lifecycle' for domain 'instance-00000001': Stopped Failed",
        "2026-12-02 10:00:02.300+0000: event 'lifecycle' for domain 'instance-00000002': Suspended I/O Error",
        "2026-12-02 10:00:03.400+0000: event 'watchdog' for domain 'instance-00000003': poweroff",
        "2026-12-02 10:00:04.500+0000: event 'io-error' for domain 'instance-00000004': /var/lib/nova/instances/x/disk (virtio-disk0) report",
        "2026-12-02 10:00:05.600+0000: event 'io-error-reason' for domain 'instance-00000004': /dev/sdb (virtio-disk1) pause due to enospc",
        "2026-12-02 10:00:06.700+0000: event 'reboot' for domain 'instance-00000005'",
        "2026-12-02 10:00:07.800+0000: event 'control-error' for domain 'instance-00000006'",
        "2026-12-02 10:00:08.900+0000: event 'lifecycle' for domain 'instance-00000007': Stopped Destroyed",
        "2026-12-02 10:00:09.000+0000: event 'lifecycle' for domain 'instance-00000008': Shutdown Finished",
        "2026-12-02 10:00:10.000+0000: event 'watchdog' for domain 'instance-00000009': inject-nmi",
        "2026-12-02 10:00:11.000+0000: event 'tunable' for domain 'instance-00000001':",
        "event 'lifecycle' for domain 'it's quoted': Stopped Shutdown",
        "events received: 12",
    ];

    #[test]
    fn recorded_virsh_lines_map_as_masakari_instancemonitor_does() {
        let mapped: Vec<_> = RECORDED
            .iter()
            .filter_map(|l| parse_virsh_line(l))
            .map(|o| (o.domain.clone(), map(&o.event)))
            .collect();
        let expected = [
            ("instance-00000001", None),
            ("instance-00000001", Some(("LIFECYCLE", "STOPPED_FAILED"))),
            (
                "instance-00000002",
                Some(("LIFECYCLE", "SUSPENDED_IOERROR")),
            ),
            ("instance-00000003", Some(("WATCHDOG", "WATCHDOG_POWEROFF"))),
            ("instance-00000004", Some(("IO_ERROR", "IO_ERROR_REPORT"))),
            ("instance-00000004", Some(("IO_ERROR_REASON", "UNKNOWN"))),
            ("instance-00000005", Some(("REBOOT", "UNKNOWN"))),
            ("instance-00000006", Some(("CONTROL_ERROR", "UNKNOWN"))),
            (
                "instance-00000007",
                Some(("LIFECYCLE", "STOPPED_DESTROYED")),
            ),
            (
                "instance-00000008",
                Some(("LIFECYCLE", "SHUTDOWN_FINISHED")),
            ),
            ("instance-00000009", None),
            ("it's quoted", Some(("LIFECYCLE", "STOPPED_SHUTDOWN"))),
        ];
        assert_eq!(
            mapped,
            expected
                .iter()
                .map(|(d, m)| ((*d).to_owned(), *m))
                .collect::<Vec<_>>()
        );
    }

    struct Recorded(VecDeque<&'static str>);

    impl EventSource for Recorded {
        async fn next(&mut self) -> Result<Observed, Error> {
            while let Some(line) = self.0.pop_front() {
                if let Some(o) = parse_virsh_line(line) {
                    return Ok(o);
                }
            }
            Err(Error::Ended)
        }

        async fn uuid(&mut self, domain: &str) -> Option<String> {
            let n: u32 = domain.trim_start_matches("instance-").parse().ok()?;
            Some(format!("00000000-0000-0000-0000-{n:012}"))
        }
    }

    #[tokio::test]
    async fn recorded_events_are_spooled_as_vm_reports() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(&dir.path().join("s.redb")).unwrap();
        let source = Recorded(RECORDED.iter().copied().collect());
        let ended = watch(
            source,
            "compute-01",
            &spool,
            &Metrics::new(),
            &CancellationToken::new(),
        )
        .await;
        assert!(matches!(ended, Err(Error::Ended)));
        let entries = spool.entries().await.unwrap();
        assert_eq!(
            entries.len(),
            9,
            "the quoted domain has no uuid; unmapped events are skipped"
        );
        let first = &entries[0].report;
        assert_eq!(first.kind, crate::report::ReportKind::Vm);
        assert_eq!(first.payload["event"], "LIFECYCLE");
        assert_eq!(first.payload["vir_domain_event"], "STOPPED_FAILED");
        assert_eq!(
            first.payload["instance_uuid"],
            "00000000-0000-0000-0000-000000000001"
        );
    }
}
