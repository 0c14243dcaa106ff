//! Evacuating one instance: the state to prepare and to restore (the one
//! recorded with the plan when known, else inferred), and the
//! verdict on an evacuation in flight from what Nova shows (the server, its
//! migration record), following the contract's poller rules: a failed
//! claim, a scheduling failure or a compute error is seen at once from the
//! migration, not after a timeout.

use instanceha_proto::run::PriorState;
use openstack_client::nova::{Migration, Server};

/// The state an instance should be in after its recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DesiredState {
    Active,
    Stopped,
    /// It was in error before the failure; evacuation makes it active, and
    /// it is put back to error as Masakari does.
    Error,
}

impl From<PriorState> for DesiredState {
    fn from(prior: PriorState) -> Self {
        match prior {
            PriorState::Active => Self::Active,
            PriorState::Stopped => Self::Stopped,
            PriorState::Error => Self::Error,
        }
    }
}

impl From<DesiredState> for PriorState {
    fn from(desired: DesiredState) -> Self {
        match desired {
            DesiredState::Active => Self::Active,
            DesiredState::Stopped => Self::Stopped,
            DesiredState::Error => Self::Error,
        }
    }
}

/// What to do before evacuating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preparation {
    /// Nova evacuates only active, stopped or error instances with no task:
    /// reset anything else to error first.
    pub reset_to_error: bool,
    pub desired: DesiredState,
}

/// Nova's power state "running".
const RUNNING: i64 = 1;

/// What to do before evacuating `server`, and the state to restore after.
/// `earlier_failed`: the newest evacuation of it away from the failed host
/// before this run failed (an earlier attempt of this recovery). Nova puts
/// an instance whose evacuation fails in error, so its error then says
/// nothing of the state it was in before the host failed: the power state
/// the failed host last reported does (measured on real Nova, nova-conductor
/// killed: the first evacuation failed, the API's retry succeeded, and the
/// instance must end active, not put back in the error the failure made).
pub fn prepare(server: &Server, earlier_failed: bool) -> Preparation {
    let vm_state = server.vm_state();
    let busy = server.task_state.is_some();
    let desired = match vm_state {
        "active" => DesiredState::Active,
        "stopped" => DesiredState::Stopped,
        "error" if !earlier_failed => DesiredState::Error,
        // resized, paused, suspended, rescued...: keep a running guest
        // running, leave the others stopped for the operator.
        _ if server.power_state == Some(RUNNING) => DesiredState::Active,
        _ => DesiredState::Stopped,
    };
    let evacuable = matches!(vm_state, "active" | "stopped" | "error");
    Preparation {
        reset_to_error: busy || !evacuable,
        desired,
    }
}

/// What to do before evacuating `server`, whose state before the failure
/// is known (recorded with the plan at the first attempt): that state is
/// restored after, whatever an earlier attempt left.
pub fn prepare_known(server: &Server, prior: PriorState) -> Preparation {
    Preparation {
        desired: prior.into(),
        ..prepare(server, false)
    }
}

/// What to do after a successful evacuation to reach the desired state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restoration {
    Nothing,
    Stop,
    Start,
    ResetToError,
}

pub fn restoration(desired: DesiredState, observed_vm_state: &str) -> Restoration {
    match (desired, observed_vm_state) {
        (DesiredState::Active, "stopped") => Restoration::Start,
        (DesiredState::Stopped, "active") => Restoration::Stop,
        (DesiredState::Error, "error") => Restoration::Nothing,
        (DesiredState::Error, _) => Restoration::ResetToError,
        _ => Restoration::Nothing,
    }
}

/// Nova's view of an evacuation in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Still going; the text says where.
    InProgress(String),
    /// On `dest_host`, settled.
    Succeeded { dest_host: String },
    /// Nova gave up; the text says why.
    Failed(String),
}

fn fault(server: &Server) -> String {
    server
        .fault
        .as_ref()
        .map(|f| format!(": {}", f.message))
        .unwrap_or_default()
}

/// Judges an evacuation away from `source` from the server and its newest
/// evacuation migration (if one is known). `was_error` says whether the
/// instance was in error before (then error afterwards is not news).
pub fn judge(
    source: &str,
    server: &Server,
    migration: Option<&Migration>,
    was_error: bool,
) -> Verdict {
    let settled = server.task_state.is_none();
    let moved = server.host.as_deref().is_some_and(|h| h != source);
    let vm_state = server.vm_state();
    if let Some(m) = migration {
        match m.status.as_str() {
            "error" | "failed" => {
                return Verdict::Failed(format!(
                    "nova reports evacuation migration {} {}{}",
                    m.id,
                    m.status,
                    fault(server)
                ));
            }
            // Nova's conductor takes the instance's *first* `accepted`
            // migration for a rebuild (`Migration.get_by_instance_and_status`
            // in `rebuild_instance`): after a lost evacuation is repaired,
            // the rebuild settles the old record and leaves the new one
            // `accepted` for good. Settled away from the failed host, the
            // instance was rebuilt there all the same (measured on real Nova:
            // the destination's nova-compute killed and started again).
            "accepted" if moved && settled && matches!(vm_state, "active" | "stopped") => {
                return Verdict::Succeeded {
                    dest_host: server.host.clone().unwrap_or_default(),
                };
            }
            "done" | "completed" => {
                if moved && settled && matches!(vm_state, "active" | "stopped") {
                    return Verdict::Succeeded {
                        dest_host: server.host.clone().unwrap_or_default(),
                    };
                }
                if settled && vm_state == "error" {
                    return Verdict::Failed(format!(
                        "the instance is in error on {} after its evacuation{}",
                        server.host.as_deref().unwrap_or("?"),
                        fault(server)
                    ));
                }
            }
            _ => {}
        }
    }
    if settled && vm_state == "error" && !was_error {
        return Verdict::Failed(format!("the instance went to error{}", fault(server)));
    }
    if migration.is_none() && moved && settled && matches!(vm_state, "active" | "stopped") {
        // No migration record to wait for (an old Nova): the server alone.
        return Verdict::Succeeded {
            dest_host: server.host.clone().unwrap_or_default(),
        };
    }
    Verdict::InProgress(format!(
        "vm_state {vm_state}, task_state {}, host {}, migration {}",
        server.task_state.as_deref().unwrap_or("none"),
        server.host.as_deref().unwrap_or("?"),
        migration
            .map(describe)
            .unwrap_or_else(|| "none seen yet".to_owned())
    ))
}

/// `m`'s id and status, and what Nova has not done yet: schedule it (no
/// destination), claim it on its destination, or finish the rebuild there
/// (the host moved and the migration `done`).
pub fn describe(m: &Migration) -> String {
    match (m.status.as_str(), m.dest_compute.as_deref()) {
        ("accepted", None) => format!("{} accepted and never scheduled (no destination)", m.id),
        ("accepted", Some(dest)) => format!(
            "{} accepted for {dest}, not yet claimed by its nova-compute",
            m.id
        ),
        ("pre-migrating", dest) => format!(
            "{} pre-migrating on {}: the rebuild there has not finished (host not moved, migration not done)",
            m.id,
            dest.unwrap_or("?")
        ),
        (status, _) => format!("{} {status}", m.id),
    }
}

/// Whether Nova is still carrying out the evacuation `m` records (it has
/// not reached done, completed, error or failed).
pub fn in_flight(m: &Migration) -> bool {
    !matches!(
        m.status.as_str(),
        "done" | "completed" | "error" | "failed" | "cancelled"
    )
}

/// Where an evacuation Nova failed left the server, as Nova records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeftAfterFailure {
    /// On the failed host with no task: nothing in Nova acts on it any
    /// more, so evacuating it again cannot make a second copy.
    OnSource,
    /// On the failed host, its task still set (named): Nova has not
    /// finished recording the failure. The destination's nova-compute saves
    /// the migration `failed` first, then releases its Placement
    /// allocation and sends its notifications, and only then clears the
    /// task (`rebuild_instance`, `_error_out_instance_on_exception`): read
    /// again.
    Settling(String),
    /// On another host (named): a guest may run there; never evacuated
    /// again.
    Elsewhere(String),
}

/// Where the evacuation of `server` away from the failed host `source`,
/// which Nova failed, left it.
pub fn left_after_failure(source: &str, server: &Server) -> LeftAfterFailure {
    match (server.host.as_deref(), server.task_state.as_deref()) {
        (Some(host), _) if host != source => LeftAfterFailure::Elsewhere(host.to_owned()),
        (None, _) => LeftAfterFailure::Elsewhere("no host".to_owned()),
        (Some(_), None) => LeftAfterFailure::OnSource,
        (Some(_), Some(task)) => LeftAfterFailure::Settling(task.to_owned()),
    }
}

/// Whether the server shows an evacuation in flight (a task from an earlier
/// request, for example one whose answer was lost).
pub fn rebuilding(server: &Server) -> bool {
    matches!(
        server.task_state.as_deref(),
        Some("rebuilding" | "rebuild_block_device_mapping" | "rebuild_spawning")
    )
}

/// What Nova says of an instance of the failed host `source`, when the
/// engine asks without acting (a reconcile run).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Truth {
    /// Nova is still carrying out an evacuation: follow it to its end.
    InProgress(String),
    /// Moved away from `source` and settled (active or stopped).
    Recovered { host: String, vm_state: String },
    /// Not recovered; the text says what Nova shows.
    NotRecovered(String),
}

/// Reads the truth from the server and its newest evacuation away from
/// `source` (if any).
pub fn truth(source: &str, server: &Server, newest: Option<&Migration>) -> Truth {
    let left_behind = newest.is_some_and(|m| {
        matches!(
            judge(source, server, Some(m), false),
            Verdict::Succeeded { .. }
        )
    });
    if rebuilding(server) || (newest.is_some_and(in_flight) && !left_behind) {
        return Truth::InProgress(format!(
            "an evacuation is in progress (task_state {}, migration {})",
            server.task_state.as_deref().unwrap_or("none"),
            newest
                .map(describe)
                .unwrap_or_else(|| "none found".to_owned())
        ));
    }
    let host = server.host.as_deref().unwrap_or("?");
    let vm_state = server.vm_state();
    if host != source
        && server.host.is_some()
        && server.task_state.is_none()
        && matches!(vm_state, "active" | "stopped")
    {
        return Truth::Recovered {
            host: host.to_owned(),
            vm_state: vm_state.to_owned(),
        };
    }
    let migration = newest
        .map(|m| format!("; its last evacuation, migration {}, {}", m.id, m.status))
        .unwrap_or_default();
    let place = if host == source {
        format!("still on the failed host {source}")
    } else {
        format!("on {host}")
    };
    Truth::NotRecovered(format!(
        "nova shows it {vm_state} {place}{}{}{migration}",
        server
            .task_state
            .as_deref()
            .map(|t| format!(" (task {t})"))
            .unwrap_or_default(),
        fault(server)
    ))
}

#[cfg(test)]
#[path = "evacuation_tests.rs"]
mod tests;
