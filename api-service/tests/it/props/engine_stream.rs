//! The engine stream under bad input: events out of order, duplicated
//! (replays), for instances the plan never announced, malformed (no body,
//! zero sequence, another run, unknown enum values, missing or impossible
//! times) and oversized (identifiers over 255 characters are refused,
//! messages over 4096 are cut).
//!
//! Two properties, both against a small model of the rules (events in
//! order and exactly once by sequence; an instance must be planned; pending
//! → ongoing → succeeded, pending | ongoing → failed | ignored):
//!
//! * [`store_applies_batches_in_order_exactly_once_or_not_at_all`] drives
//!   `Store::apply_run_events` with arbitrary batches: a batch the model
//!   refuses is `Rejected` and writes nothing (every row of the database
//!   compared); an accepted one writes what the model says; a replayed
//!   batch changes nothing but the lease; and the resolved run keeps the
//!   status invariants. On SQLite, and on PostgreSQL and MariaDB when their
//!   test URLs are set.
//! * [`dispatcher_persists_or_refuses_what_a_bad_engine_sends`] runs the
//!   real dispatcher against a scripted engine (the generated
//!   `engine_server::Engine`) that sends one event at a time and waits for
//!   its ack: every ack follows the event's persistence, the first event
//!   `dispatch::convert::run_event` or the store refuses cancels the run,
//!   and the notification ends as the status rules say for what was
//!   persisted. On SQLite.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use instanceha_api::domain::{
    InstanceResult, NewNotification, NotificationId, NotificationType, PlannedInstance,
    ProgressState, RunEvent, RunKind, SequencedEvent, VMoveType,
};
use instanceha_api::lifecycle::intake::Admitted;
use instanceha_api::lifecycle::resolution::{Resolution, RetryBudget, resolve};
use instanceha_api::lifecycle::{RunEnd, RunOutcome, RunPolicy, VMoveView};
use instanceha_api::status::{NotificationStatus, VMoveStatus};
use instanceha_api::store::{self, Intake, IntakeWindows, Store};
use instanceha_proto::engine::v1 as epb;
use instanceha_proto::v1 as pb;
use proptest::prelude::*;
use proptest::sample::select;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status, Streaming};

use super::{RawDb, diff, runner, runtime};
use crate::backends::Backend;
use crate::helpers::{TestApp, host_down, host_request, segment_request, spawn_app_with};

const LEASE: Duration = Duration::from_secs(3600);
/// Instances a plan may announce; `ghost` never is.
const PLANNABLE: [&str; 4] = ["i0", "i1", "i2", "i3"];
const INSTANCES: [&str; 5] = ["i0", "i1", "i2", "i3", "ghost"];
/// A host that exists (its flags may change) and one that does not.
const HOSTS: [&str; 2] = ["spare-01", "nowhere"];
/// An evacuation, on the wire.
const EVACUATION: i32 = pb::VmoveType::Evacuation as i32;
/// Longest kept message (`instanceha_proto::run::wire::MAX_MESSAGE`).
const MAX_MESSAGE: usize = 4096;

// ---- the model ------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Succeeded,
    Failed,
    Ignored,
}

/// What a well-formed engine event means.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Ev {
    Plan(Vec<String>),
    Started(String),
    Step(String),
    Finished(String, Outcome),
    Progress(Option<String>),
    HostUpdate(String, Option<bool>, Option<bool>),
    Done(RunOutcome),
}

/// The persisted state of one run as the rules say it must be.
#[derive(Clone, Debug, Default)]
struct Model {
    sequence: u64,
    vmoves: BTreeMap<String, VMoveStatus>,
    progress: usize,
    /// `spare-01`'s (on_maintenance, reserved).
    spare: (bool, bool),
}

impl Model {
    /// Applies a batch all or nothing; `Ok` with the `Done` it held.
    fn apply(&mut self, batch: &[(u64, Ev)]) -> Result<Option<RunOutcome>, String> {
        use VMoveStatus as S;
        let mut next = self.clone();
        let mut done = None;
        for (sequence, event) in batch {
            if *sequence <= next.sequence {
                continue;
            }
            if *sequence != next.sequence + 1 {
                return Err(format!("gap: {sequence} after {}", next.sequence));
            }
            next.sequence = *sequence;
            let status = |m: &Model, i: &str| m.vmoves.get(i).copied();
            match event {
                Ev::Plan(instances) => {
                    for i in instances {
                        next.vmoves.entry(i.clone()).or_insert(S::Pending);
                    }
                }
                Ev::Started(i) => match status(&next, i) {
                    Some(S::Pending) => {
                        next.vmoves.insert(i.clone(), S::Ongoing);
                        next.progress += 1;
                    }
                    other => return Err(format!("start {i} {other:?}")),
                },
                Ev::Step(i) => {
                    if status(&next, i) != Some(S::Ongoing) {
                        return Err(format!("step {i}"));
                    }
                }
                Ev::Finished(i, outcome) => {
                    let to = match (status(&next, i), outcome) {
                        (Some(S::Ongoing), Outcome::Succeeded) => S::Succeeded,
                        (Some(S::Pending | S::Ongoing), Outcome::Failed) => S::Failed,
                        (Some(S::Pending | S::Ongoing), Outcome::Ignored) => S::Ignored,
                        (other, _) => return Err(format!("finish {i} {other:?}")),
                    };
                    next.vmoves.insert(i.clone(), to);
                    next.progress += 1;
                }
                // Progress about an instance must be about a planned one.
                Ev::Progress(Some(i)) if status(&next, i).is_none() => {
                    return Err(format!("progress of unplanned {i}"));
                }
                Ev::Progress(_) => next.progress += 1,
                Ev::HostUpdate(host, maintenance, reserved) => {
                    if host == "spare-01" {
                        next.spare.0 = maintenance.unwrap_or(next.spare.0);
                        next.spare.1 = reserved.unwrap_or(next.spare.1);
                    }
                }
                Ev::Done(outcome) => done = Some(outcome.clone()),
            }
        }
        *self = next;
        Ok(done)
    }

    /// The resolution the status rules give this run's end (the first and
    /// only run of its notification).
    fn resolution(&self, end: &RunEnd, max_attempts: u32) -> Resolution<String> {
        let views: Vec<VMoveView<'_, String>> = self
            .vmoves
            .iter()
            .map(|(i, status)| VMoveView {
                id: i.clone(),
                instance: i.as_str(),
                status: *status,
                message: None,
                retryable: false,
            })
            .collect();
        let budget = RetryBudget {
            attempt: 1,
            max_attempts,
            window_open: true,
            verdict_open: true,
        };
        resolve(end, RunKind::Recover, &views, budget)
    }
}

// ---- strategies ------------------------------------------------------------------

fn run_outcome() -> impl Strategy<Value = RunOutcome> {
    let message = prop_oneof![Just(String::new()), "[a-z ]{1,12}"];
    (0..4u8, message, any::<bool>()).prop_map(|(kind, message, retryable)| match kind {
        0 => RunOutcome::Completed { message },
        1 => RunOutcome::Failed { message, retryable },
        2 => RunOutcome::Ignored { message },
        _ => RunOutcome::Cancelled { message },
    })
}

fn event() -> impl Strategy<Value = Ev> {
    let instance = || select(INSTANCES.to_vec()).prop_map(str::to_owned);
    let outcome = select(vec![Outcome::Succeeded, Outcome::Failed, Outcome::Ignored]);
    prop_oneof![
        2 => prop::collection::vec(select(PLANNABLE.to_vec()).prop_map(str::to_owned), 0..4)
            .prop_map(Ev::Plan),
        3 => instance().prop_map(Ev::Started),
        1 => instance().prop_map(Ev::Step),
        3 => (instance(), outcome).prop_map(|(i, o)| Ev::Finished(i, o)),
        1 => proptest::option::of(instance()).prop_map(Ev::Progress),
        1 => (select(HOSTS.to_vec()), any::<Option<bool>>(), any::<Option<bool>>())
            .prop_map(|(h, m, r)| Ev::HostUpdate(h.to_owned(), m, r)),
        1 => run_outcome().prop_map(Ev::Done),
    ]
}

/// What a working engine sends: the plan, each instance's start, a step
/// and its result, then `Done`.
fn plausible() -> impl Strategy<Value = Vec<Ev>> {
    (
        prop::collection::vec(
            select(vec![Outcome::Succeeded, Outcome::Failed, Outcome::Ignored]),
            1..=PLANNABLE.len(),
        ),
        run_outcome(),
    )
        .prop_map(|(outcomes, done)| {
            let planned: Vec<String> = PLANNABLE[..outcomes.len()]
                .iter()
                .map(|s| s.to_string())
                .collect();
            let mut events = vec![Ev::Plan(planned.clone())];
            for (i, outcome) in planned.iter().zip(outcomes) {
                events.push(Ev::Started(i.clone()));
                events.push(Ev::Step(i.clone()));
                events.push(Ev::Finished(i.clone(), outcome));
            }
            events.push(Ev::Done(done));
            events
        })
}

/// A change to a numbered stream: out of order, replayed, lost, renumbered.
#[derive(Clone, Debug)]
enum Mutation {
    Swap(prop::sample::Index, prop::sample::Index),
    Duplicate(prop::sample::Index, prop::sample::Index),
    Drop(prop::sample::Index),
    Renumber(prop::sample::Index, u64),
    Insert(prop::sample::Index, Ev),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    use prop::sample::Index;
    prop_oneof![
        2 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::Duplicate(a, b)),
        1 => any::<Index>().prop_map(Mutation::Drop),
        1 => (any::<Index>(), prop_oneof![Just(0u64), 1..20u64, Just(u64::MAX)])
            .prop_map(|(i, s)| Mutation::Renumber(i, s)),
        2 => (any::<Index>(), event()).prop_map(|(i, e)| Mutation::Insert(i, e)),
    ]
}

/// A numbered stream: arbitrary events or a plausible run, then a few
/// mutations.
fn stream() -> impl Strategy<Value = Vec<(u64, Ev)>> {
    (
        prop_oneof![
            1 => prop::collection::vec(event(), 1..10),
            2 => plausible(),
        ],
        prop::collection::vec(mutation(), 0..4),
    )
        .prop_map(|(events, mutations)| {
            let mut numbered: Vec<(u64, Ev)> =
                events.into_iter().zip(1..).map(|(e, s)| (s, e)).collect();
            for m in mutations {
                let n = numbered.len();
                match m {
                    Mutation::Swap(a, b) if n > 1 => numbered.swap(a.index(n), b.index(n)),
                    Mutation::Duplicate(a, b) if n > 0 => {
                        let copy = numbered[a.index(n)].clone();
                        numbered.insert(b.index(n + 1), copy);
                    }
                    Mutation::Drop(a) if n > 1 => {
                        numbered.remove(a.index(n));
                    }
                    Mutation::Renumber(a, s) if n > 0 => numbered[a.index(n)].0 = s,
                    Mutation::Insert(a, e) => {
                        let at = a.index(n + 1);
                        let sequence = numbered.get(at).map_or(n as u64 + 1, |(s, _)| *s);
                        numbered.insert(at, (sequence, e));
                    }
                    _ => {}
                }
            }
            numbered
        })
}

// ---- property 1: the store -------------------------------------------------------

fn domain(sequence: u64, event: &Ev) -> SequencedEvent {
    let at = Utc::now();
    let event = match event.clone() {
        Ev::Plan(instances) => RunEvent::Plan(
            instances
                .into_iter()
                .map(|i| PlannedInstance {
                    instance_name: format!("vm-{i}"),
                    instance_id: i.into(),
                    source_host: "compute-01".to_owned(),
                    vmove_type: VMoveType::Evacuation,
                    prior_state: None,
                })
                .collect(),
        ),
        Ev::Started(instance_id) => RunEvent::InstanceStarted {
            instance_id: instance_id.into(),
            at,
        },
        Ev::Step(instance_id) => RunEvent::InstanceStep {
            instance_id: instance_id.into(),
            step: "evacuate".to_owned(),
            message: "evacuating".to_owned(),
            at,
        },
        Ev::Finished(instance_id, outcome) => RunEvent::InstanceFinished {
            instance_id: instance_id.into(),
            result: match outcome {
                Outcome::Succeeded => InstanceResult::Succeeded {
                    dest_host: Some("compute-09".to_owned()),
                    note: None,
                },
                // An engine that gives no reason still leaves one behind.
                Outcome::Failed => InstanceResult::Failed {
                    message: String::new(),
                    retryable: false,
                },
                Outcome::Ignored => InstanceResult::Ignored {
                    message: "no need".to_owned(),
                },
            },
            start: Some(at),
            end: at,
        },
        Ev::Progress(instance_id) => RunEvent::Progress {
            task: "disable_compute_service".to_owned(),
            state: ProgressState::Info,
            message: "progress".to_owned(),
            at,
            instance_id: instance_id.map(Into::into),
        },
        Ev::HostUpdate(hostname, on_maintenance, reserved) => RunEvent::HostUpdate {
            hostname,
            on_maintenance,
            reserved,
        },
        Ev::Done(outcome) => RunEvent::Done(outcome),
    };
    SequencedEvent { sequence, event }
}

/// A new notification for `hostname`, claimed for a run.
async fn claimed(store: &Store, hostname: &str) -> (NotificationId, String) {
    let new = NewNotification {
        notification_type: NotificationType::ComputeHost,
        hostname: hostname.to_owned(),
        generated_time: store.now(),
        payload: BTreeMap::from([("event".to_owned(), "STOPPED".to_owned())]),
        idempotency_key: None,
        trace_context: None,
    };
    let stored = store
        .create_notifications(&[new], IntakeWindows::NONE, |_, _| {
            Ok::<_, store::Error>(Admitted::accept())
        })
        .await
        .unwrap();
    let Some(Intake::Created(n)) = stored.into_iter().next() else {
        panic!("the notification was not created");
    };
    let (_, run) = store
        .claim(n.id, "props", &policy(1))
        .await
        .unwrap()
        .unwrap();
    (n.id, run.run_id.to_string())
}

/// A long lease, `max_attempts` runs, a retry window that stays open.
fn policy(max_attempts: u32) -> RunPolicy {
    RunPolicy {
        lease: LEASE,
        retry_window: LEASE,
        max_attempts,
        ..instanceha_api::dispatch::DispatchSettings::default().run_policy()
    }
}

/// The invariants of a resolved notification, as clients read them.
async fn check_invariants(store: &Store, id: NotificationId) -> Result<NotificationStatus, String> {
    let n = store.notification(id).await.map_err(|e| e.to_string())?;
    let vmoves = store
        .list_vmoves(
            id,
            &Default::default(),
            instanceha_api::domain::PageRequest::first(1000),
        )
        .await
        .map_err(|e| e.to_string())?
        .items;
    for v in &vmoves {
        let r = &v.record;
        if n.status().is_terminal() && !r.status().is_resolved() {
            return Err(format!(
                "{} notification with a {} vmove {}",
                n.status(),
                r.status(),
                v.instance_id
            ));
        }
        if r.status() == VMoveStatus::Failed
            && (r.end_time().is_none() || r.message().is_none_or(|m| m.trim().is_empty()))
        {
            return Err(format!(
                "failed vmove {} without end time or message: {r:?}",
                v.instance_id
            ));
        }
        if r.message()
            .as_ref()
            .is_some_and(|m| m.chars().count() > MAX_MESSAGE + 300)
        {
            return Err(format!(
                "vmove {} kept a message of {} characters",
                v.instance_id,
                r.message().unwrap().chars().count()
            ));
        }
    }
    if n.status() == NotificationStatus::Finished
        && !vmoves.iter().all(|v| {
            matches!(
                v.record.status(),
                VMoveStatus::Succeeded | VMoveStatus::Ignored
            )
        })
    {
        return Err("finished with a vmove neither succeeded nor ignored".to_owned());
    }
    Ok(n.status())
}

async fn vmove_statuses(store: &Store, id: NotificationId) -> BTreeMap<String, VMoveStatus> {
    store
        .list_vmoves(
            id,
            &Default::default(),
            instanceha_api::domain::PageRequest::first(1000),
        )
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|v| (v.instance_id, v.record.status()))
        .collect()
}

async fn spare_flags(store: &Store) -> (bool, bool) {
    let host = store.host_by_name("spare-01").await.unwrap().unwrap();
    (host.on_maintenance, host.reserved)
}

/// The fixture both properties share: `compute-01` and `spare-01` in a
/// segment, whose id it returns.
async fn hosts(app: &mut TestApp) -> String {
    let segment = app
        .segments
        .create_segment(segment_request("rack-a"))
        .await
        .unwrap()
        .into_inner();
    for name in ["compute-01", "spare-01"] {
        app.hosts
            .create_host(host_request(&segment.id, name))
            .await
            .unwrap();
    }
    segment.id
}

#[test]
fn store_applies_batches_in_order_exactly_once_or_not_at_all() {
    check_store(Backend::Sqlite, 128);
}

pub(super) fn check_store(backend: Backend, cases: u32) {
    let rt = runtime();
    let mut url = String::new();
    let Some(mut app) = rt.block_on(spawn_app_with(backend, |s| url = s.database.url.clone()))
    else {
        return;
    };
    let segment = rt.block_on(hosts(&mut app));
    let db = rt.block_on(RawDb::open(&url));
    let store = app.api.store().clone();
    // Each case reports its own host: a run left unfinished would queue the
    // next report about the same host behind it.
    let host_client = app.hosts.clone();
    let cases_run = std::sync::atomic::AtomicUsize::new(0);
    let strategy = (
        stream(),
        prop::collection::vec((1..4usize, any::<bool>()), 1..12),
        1..=3u32,
    );
    let result = runner(cases).run(&strategy, |(numbered, batches, max_attempts)| {
        rt.block_on(async {
            let case = cases_run.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let source = format!("failed-{case:04}");
            host_client
                .clone()
                .create_host(host_request(&segment, &source))
                .await
                .map_err(|e| TestCaseError::fail(format!("create {source}: {e}")))?;
            let (id, run_id) = claimed(&store, &source).await;
            let mut model = Model {
                spare: spare_flags(&store).await,
                ..Model::default()
            };
            let mut done = None;
            let mut rest = numbered.as_slice();
            for (size, replay) in batches.iter().cycle().take(numbered.len()) {
                if rest.is_empty() {
                    break;
                }
                let (batch, tail) = rest.split_at((*size).min(rest.len()));
                rest = tail;
                let events: Vec<SequencedEvent> =
                    batch.iter().map(|(s, e)| domain(*s, e)).collect();
                // The whole database is compared around the batches the
                // model refuses (an accepted one is checked against the model).
                let expected = model.apply(batch);
                let before = match expected {
                    Err(_) => Some(db.dump().await),
                    Ok(_) => None,
                };
                let applied = store.apply_run_events(id, &run_id.as_str().into(), &events, LEASE).await;
                match expected {
                    Err(why) => {
                        let before = before.unwrap_or_default();
                        prop_assert!(
                            matches!(applied, Err(store::Error::Rejected(_))),
                            "the model refuses ({why}) but the store answered {applied:?} for {batch:?}"
                        );
                        let after = db.dump().await;
                        prop_assert!(before == after, "a rejected batch wrote:\n{}", diff(&before, &after));
                    }
                    Ok(batch_done) => {
                        let applied = match applied {
                            Ok(applied) => applied,
                            Err(e) => {
                                return Err(TestCaseError::fail(format!("the store refused {batch:?}: {e}")));
                            }
                        };
                        prop_assert_eq!(applied.sequence, model.sequence);
                        prop_assert_eq!(&applied.done, &batch_done);
                        done = done.or(batch_done);
                        prop_assert_eq!(vmove_statuses(&store, id).await, model.vmoves.clone());
                        prop_assert_eq!(store.progress_events(id).await.unwrap().len(), model.progress);
                        prop_assert_eq!(spare_flags(&store).await, model.spare);
                        if *replay {
                            // Only the lease moves.
                            let masked = [("notifications", "lease_until")];
                            let before = db.dump_masked(&masked).await;
                            let again = store.apply_run_events(id, &run_id.as_str().into(), &events, LEASE).await;
                            let again = again.map_err(|e| TestCaseError::fail(format!("a replay failed: {e}")))?;
                            prop_assert!(again.vmoves.is_empty() && again.progress.is_empty() && again.done.is_none());
                            prop_assert_eq!(again.sequence, model.sequence);
                            let after = db.dump_masked(&masked).await;
                            prop_assert!(before == after, "a replay wrote:\n{}", diff(&before, &after));
                        }
                    }
                }
            }
            let end = match done {
                Some(outcome) => RunEnd::Done(outcome),
                None => RunEnd::engine_lost("the stream ended"),
            };
            let expected = model.resolution(&end, max_attempts).status();
            store
                .resolve_run(id, &run_id.as_str().into(), &end, &policy(max_attempts))
                .await
                .map_err(|e| TestCaseError::fail(format!("resolve: {e}")))?;
            let status = check_invariants(&store, id).await.map_err(TestCaseError::fail)?;
            prop_assert_eq!(status, expected);
            Ok(())
        })
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    rt.block_on(app.stop());
}

// ---- property 2: the dispatcher and a scripted engine ----------------------------

/// How an event goes wrong on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wire {
    Fine,
    ZeroSequence,
    WrongRun,
    NoBody,
    EmptyId,
    LongId,
    UnknownEnum,
    NoTime,
    ImpossibleTime,
    LongName,
    /// Not an error: cut to 4096 characters.
    LongMessage,
}

fn wire() -> impl Strategy<Value = Wire> {
    use Wire::*;
    prop_oneof![
        30 => Just(Fine),
        1 => Just(ZeroSequence),
        1 => Just(WrongRun),
        1 => Just(NoBody),
        1 => Just(EmptyId),
        1 => Just(LongId),
        1 => Just(UnknownEnum),
        1 => Just(NoTime),
        1 => Just(ImpossibleTime),
        1 => Just(LongName),
        3 => Just(LongMessage),
    ]
}

/// Whether `run_event` must refuse `event` sent as `wire`.
fn malformed(event: &Ev, wire: Wire) -> bool {
    use Wire::*;
    match wire {
        Fine | LongMessage => false,
        ZeroSequence | WrongRun | NoBody => true,
        EmptyId => match event {
            Ev::Plan(instances) => !instances.is_empty(),
            Ev::Started(_) | Ev::Step(_) | Ev::Finished(..) | Ev::HostUpdate(..) => true,
            // An empty instance id in progress means "no instance".
            Ev::Progress(_) | Ev::Done(_) => false,
        },
        LongId => match event {
            Ev::Plan(instances) => !instances.is_empty(),
            Ev::Started(_) | Ev::Step(_) | Ev::Finished(..) | Ev::HostUpdate(..) => true,
            Ev::Progress(_) => true,
            Ev::Done(_) => false,
        },
        UnknownEnum => match event {
            Ev::Plan(instances) => !instances.is_empty(),
            Ev::Finished(..) | Ev::Progress(_) | Ev::Done(_) => true,
            Ev::Started(_) | Ev::Step(_) | Ev::HostUpdate(..) => false,
        },
        NoTime | ImpossibleTime => matches!(
            event,
            Ev::Started(_) | Ev::Step(_) | Ev::Finished(..) | Ev::Progress(_)
        ),
        LongName => match event {
            Ev::Plan(instances) => !instances.is_empty(),
            Ev::Step(_) | Ev::Progress(_) => true,
            // The destination of a success is a name too.
            Ev::Finished(_, outcome) => *outcome == Outcome::Succeeded,
            Ev::Started(_) | Ev::HostUpdate(..) | Ev::Done(_) => false,
        },
    }
}

/// The event on the wire.
fn message(run_id: &str, sequence: u64, event: &Ev, wire: Wire) -> epb::RunEvent {
    use Wire::*;
    use epb::run_event::Body;
    let id = |i: &str| match wire {
        EmptyId => String::new(),
        LongId => "i".repeat(256),
        _ => i.to_owned(),
    };
    let time = match wire {
        NoTime => None,
        ImpossibleTime => Some(prost_types::Timestamp {
            seconds: i64::MAX,
            nanos: 0,
        }),
        _ => Some(crate::helpers::now()),
    };
    let long = |fine: &str| match wire {
        LongName => "n".repeat(256),
        _ => fine.to_owned(),
    };
    let text = |fine: &str| match wire {
        LongMessage => "m".repeat(10_000),
        _ => fine.to_owned(),
    };
    let body = match event {
        Ev::Plan(instances) => Body::Plan(epb::Plan {
            instances: instances
                .iter()
                .map(|i| epb::PlannedInstance {
                    instance_id: id(i),
                    instance_name: long(&format!("vm-{i}")),
                    source_host: "compute-01".to_owned(),
                    r#type: if wire == UnknownEnum { 99 } else { EVACUATION },
                    prior_state: epb::PriorState::Active as i32,
                })
                .collect(),
        }),
        Ev::Started(i) => Body::InstanceStarted(epb::InstanceStarted {
            instance_id: id(i),
            time,
        }),
        Ev::Step(i) => Body::InstanceStep(epb::InstanceStep {
            instance_id: id(i),
            step: long("evacuate"),
            message: text("evacuating"),
            time,
        }),
        Ev::Finished(i, outcome) => Body::InstanceFinished(epb::InstanceFinished {
            instance_id: id(i),
            result: match (wire, outcome) {
                (UnknownEnum, _) => 7,
                (_, Outcome::Succeeded) => epb::InstanceResult::Succeeded as i32,
                (_, Outcome::Failed) => epb::InstanceResult::Failed as i32,
                (_, Outcome::Ignored) => epb::InstanceResult::Ignored as i32,
            },
            dest_host: long("compute-09"),
            start_time: Some(crate::helpers::now()),
            end_time: time,
            retryable: false,
            message: text("it went wrong"),
        }),
        Ev::Progress(instance) => Body::Progress(epb::Progress {
            task: long("disable_compute_service"),
            state: if wire == UnknownEnum {
                99
            } else {
                pb::ProgressState::Info as i32
            },
            message: text("progress"),
            time,
            instance_id: match (wire, instance) {
                (LongId, _) => "i".repeat(256),
                (_, Some(i)) => i.clone(),
                (_, None) => String::new(),
            },
        }),
        Ev::HostUpdate(host, on_maintenance, reserved) => Body::HostUpdate(epb::HostUpdate {
            hostname: id(host),
            on_maintenance: *on_maintenance,
            reserved: *reserved,
        }),
        Ev::Done(outcome) => {
            let (outcome, message, retryable) = match outcome {
                RunOutcome::Completed { message } => (epb::RunOutcome::Completed, message, false),
                RunOutcome::Failed { message, retryable } => {
                    (epb::RunOutcome::Failed, message, *retryable)
                }
                RunOutcome::Ignored { message } => (epb::RunOutcome::Ignored, message, false),
                RunOutcome::Cancelled { message } => (epb::RunOutcome::Cancelled, message, false),
            };
            Body::Done(epb::Done {
                outcome: if wire == UnknownEnum {
                    99
                } else {
                    outcome as i32
                },
                message: text(message),
                retryable,
            })
        }
    };
    epb::RunEvent {
        sequence: if wire == ZeroSequence { 0 } else { sequence },
        run_id: if wire == WrongRun {
            "another-run".to_owned()
        } else {
            run_id.to_owned()
        },
        body: (wire != NoBody).then_some(body),
    }
}

/// What the engine saw of one run.
#[derive(Debug, Default)]
struct Seen {
    acks: Vec<u64>,
    cancelled: bool,
    /// Acks that came before the event was persisted.
    early_acks: Vec<String>,
}

struct Script {
    events: Vec<(u64, Ev, Wire)>,
    report: oneshot::Sender<Seen>,
}

/// An engine that sends its script one event at a time, each after the
/// API acknowledged the one before; stops at a `Cancel` or when the API
/// stops listening.
#[derive(Clone)]
struct ScriptedEngine {
    next: Arc<Mutex<Option<Script>>>,
    db: Arc<RawDb>,
}

#[tonic::async_trait]
impl epb::engine_server::Engine for ScriptedEngine {
    type RecoverStream = ReceiverStream<Result<epb::RunEvent, Status>>;

    async fn recover(
        &self,
        request: Request<Streaming<epb::RecoverRequest>>,
    ) -> Result<Response<Self::RecoverStream>, Status> {
        let mut inbound = request.into_inner();
        let script = self.next.lock().unwrap().take();
        let Some(script) = script else {
            return reconcile_not_recovered(inbound).await;
        };
        let (tx, rx) = mpsc::channel(4);
        let db = self.db.clone();
        tokio::spawn(async move {
            let mut seen = Seen::default();
            let run_id = match inbound.message().await {
                Ok(Some(epb::RecoverRequest {
                    body: Some(epb::recover_request::Body::StartRun(start)),
                })) => start.run_id,
                other => panic!("the API did not start with Start: {other:?}"),
            };
            for (sequence, event, wire) in &script.events {
                if tx
                    .send(Ok(message(&run_id, *sequence, event, *wire)))
                    .await
                    .is_err()
                {
                    break;
                }
                let answer = tokio::time::timeout(Duration::from_secs(10), inbound.message()).await;
                match answer {
                    Ok(Ok(Some(epb::RecoverRequest {
                        body: Some(epb::recover_request::Body::Ack(ack)),
                    }))) => {
                        // No row: the notification has moved on to its
                        // next run (a reconcile starts as soon as this one
                        // is resolved), which happens only after every
                        // event of this one was persisted.
                        let persisted = db
                            .scalar(format!(
                                "SELECT COALESCE(CAST(run_sequence AS TEXT), '0') FROM notifications WHERE run_id = '{run_id}'"
                            ))
                            .await
                            .map_or(u64::MAX, |s| s.parse::<u64>().unwrap_or_default());
                        if persisted < ack.sequence {
                            seen.early_acks
                                .push(format!("ack {} with {persisted} persisted", ack.sequence));
                        }
                        seen.acks.push(ack.sequence);
                    }
                    Ok(Ok(Some(epb::RecoverRequest {
                        body: Some(epb::recover_request::Body::Cancel(_)),
                    }))) => {
                        seen.cancelled = true;
                        break;
                    }
                    _ => break,
                }
            }
            let _ = script.report.send(seen);
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// The acks and the end the model expects when the events come one at a
/// time, and whether the run is cancelled for a protocol error.
fn expect_one_at_a_time(model: &mut Model, events: &[(u64, Ev, Wire)]) -> (Vec<u64>, RunEnd, bool) {
    let mut acks = Vec::new();
    for (sequence, event, wire) in events {
        // Sequence numbers start at 1.
        if *sequence == 0 || malformed(event, *wire) {
            return (acks, lost("protocol error"), true);
        }
        match model.apply(&[(*sequence, event.clone())]) {
            Err(_) => return (acks, lost("protocol error"), true),
            Ok(done) => {
                acks.push(model.sequence);
                if let Some(outcome) = done {
                    return (acks, RunEnd::Done(outcome), false);
                }
            }
        }
    }
    (acks, lost("closed"), false)
}

fn lost(reason: &str) -> RunEnd {
    RunEnd::engine_lost(reason)
}

/// Waits for the notification to leave `new` and `running`.
/// A reconcile run the scripted engine was not given a script for: Nova
/// shows none of its instances recovered.
async fn reconcile_not_recovered(
    mut inbound: Streaming<epb::RecoverRequest>,
) -> Result<Response<ReceiverStream<Result<epb::RunEvent, Status>>>, Status> {
    let start = match inbound.message().await {
        Ok(Some(epb::RecoverRequest {
            body: Some(epb::recover_request::Body::StartRun(start)),
        })) if start.kind == epb::RunKind::Reconcile as i32 => start,
        _ => return Err(Status::unavailable("no script")),
    };
    let (tx, rx) = mpsc::channel(1024);
    let time = Some(crate::helpers::now());
    let mut sequence = 0;
    let mut events = Vec::new();
    for instance in &start.instances {
        sequence += 1;
        events.push(epb::RunEvent {
            sequence,
            run_id: start.run_id.clone(),
            body: Some(epb::run_event::Body::InstanceReconciled(
                epb::InstanceReconciled {
                    instance_id: instance.instance_id.clone(),
                    result: epb::InstanceResult::Failed as i32,
                    dest_host: String::new(),
                    message: "nova shows it still on the failed host".to_owned(),
                    retryable: false,
                    time,
                },
            )),
        });
    }
    events.push(epb::RunEvent {
        sequence: sequence + 1,
        run_id: start.run_id.clone(),
        body: Some(epb::run_event::Body::Done(epb::Done {
            outcome: epb::RunOutcome::Completed as i32,
            message: String::new(),
            retryable: false,
        })),
    });
    tokio::spawn(async move {
        for event in events {
            if tx.send(Ok(event)).await.is_err() {
                return;
            }
        }
        // Acknowledgements until the API closes its side.
        while let Ok(Some(_)) = inbound.message().await {}
    });
    Ok(Response::new(ReceiverStream::new(rx)))
}

/// Waits for the notification's final status (after a reconcile run, if
/// its first run's end calls for one).
async fn settled(store: &Store, id: NotificationId) -> NotificationStatus {
    // A bound, not a pace: a case takes about 0.1 s; a loaded machine
    // (CI beside other builds) has taken over 20 s for a recover run and
    // its reconcile run.
    let every = Duration::from_millis(5);
    instanceha_testkit::eventually("a final status", Duration::from_secs(60), every, || async {
        match store.notification(id).await.unwrap().status() {
            status if status.is_terminal() => Ok(status),
            status => Err(format!("notification {id} is {status}")),
        }
    })
    .await
}

#[test]
fn dispatcher_persists_or_refuses_what_a_bad_engine_sends() {
    let rt = runtime();
    // The engine's address goes into the API's settings, and the API's
    // database into the engine: bind first, serve once both are known.
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let engine_addr = listener.local_addr().unwrap();
    let mut url = String::new();
    let mut app = rt
        .block_on(spawn_app_with(Backend::Sqlite, |s| {
            url = s.database.url.clone();
            s.dispatch.enabled = true;
            s.dispatch.engine_url = format!("http://{engine_addr}");
            s.dispatch.max_attempts = 1;
            s.dispatch.scan_interval = Duration::from_secs(3600);
            crate::helpers::every_report_counts(s);
        }))
        .expect("SQLite is always there");
    rt.block_on(hosts(&mut app));
    let engine = ScriptedEngine {
        next: Arc::default(),
        db: Arc::new(rt.block_on(RawDb::open(&url))),
    };
    let server = rt.spawn(
        tonic::transport::Server::builder()
            .add_service(epb::engine_server::EngineServer::new(engine.clone()))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let store = app.api.store().clone();
    let strategy = (stream(), prop::collection::vec(wire(), 16));
    let result = runner(64).run(&strategy, |(numbered, wires)| {
        let events: Vec<(u64, Ev, Wire)> = numbered
            .into_iter()
            .zip(wires.into_iter().cycle())
            .map(|((s, e), w)| (s, e, w))
            .collect();
        rt.block_on(async {
            let mut model = Model {
                spare: spare_flags(&store).await,
                ..Model::default()
            };
            let (expected_acks, end, protocol_error) = expect_one_at_a_time(&mut model, &events);
            let (report, seen) = oneshot::channel();
            *engine.next.lock().unwrap() = Some(Script {
                events: events.clone(),
                report,
            });
            let created = app
                .notifications
                .clone()
                .create_notification(host_down("compute-01"))
                .await
                .map_err(|e| TestCaseError::fail(format!("create: {e}")))?
                .into_inner();
            let id: NotificationId = created.id.parse().unwrap();
            let status = settled(&store, id).await;
            let seen = tokio::time::timeout(Duration::from_secs(30), seen)
                .await
                .map_err(|_| TestCaseError::fail("the engine never finished its script"))?
                .map_err(|_| TestCaseError::fail("the engine was never called"))?;
            prop_assert!(
                seen.early_acks.is_empty(),
                "acknowledged before persisted: {:?}",
                seen.early_acks
            );
            prop_assert_eq!(&seen.acks, &expected_acks);
            prop_assert_eq!(
                seen.cancelled,
                protocol_error,
                "cancelled for a protocol error"
            );
            // Without a retry (one attempt), instances without a result
            // are reconciled with Nova (which, here, shows them not
            // recovered) before the notification fails.
            let resolution = model.resolution(&end, 1);
            let reconciled: Vec<String> = match &resolution {
                Resolution::Reconcile { instances, .. } => instances.clone(),
                _ => Vec::new(),
            };
            let expected_status = if reconciled.is_empty() {
                resolution.status()
            } else {
                NotificationStatus::Failed
            };
            prop_assert_eq!(status, expected_status, "end {:?}", end);
            let message = store
                .notification(id)
                .await
                .unwrap()
                .message
                .unwrap_or_default();
            let unresolved =
                model.vmoves.is_empty() || model.vmoves.values().any(|s| !s.is_resolved());
            if protocol_error && unresolved && reconciled.is_empty() {
                prop_assert!(message.contains("protocol error"), "{message:?}");
            }
            let persisted = vmove_statuses(&store, id).await;
            // The failed resolution fails what had no result; a reconcile
            // what Nova shows not recovered.
            let mut expected = model.vmoves.clone();
            for instance in &reconciled {
                expected.insert(instance.clone(), VMoveStatus::Failed);
            }
            if status == NotificationStatus::Failed {
                for s in expected.values_mut().filter(|s| !s.is_resolved()) {
                    *s = VMoveStatus::Failed;
                }
            }
            prop_assert_eq!(persisted, expected);
            prop_assert_eq!(
                store.progress_events(id).await.unwrap().len(),
                model.progress + reconciled.len()
            );
            prop_assert_eq!(spare_flags(&store).await, model.spare);
            for event in store.progress_events(id).await.unwrap() {
                prop_assert!(
                    event.message.chars().count() <= MAX_MESSAGE + 300,
                    "a progress message of {} characters",
                    event.message.chars().count()
                );
            }
            check_invariants(&store, id)
                .await
                .map_err(TestCaseError::fail)?;
            Ok(())
        })
    });
    server.abort();
    if let Err(failure) = result {
        panic!("{failure}");
    }
    rt.block_on(app.stop());
}
