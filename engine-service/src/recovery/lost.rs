//! Judging a quiet evacuation while following it: the records the stall
//! judgement (`workflow::stall`) needs, read only for an evacuation that
//! has gone quiet (its instance action at most once per look interval, its
//! destination's nova-compute from the run's shared service watch), each
//! judgement reported once as a step, and a loss confirmed on records read
//! afresh just before anything is repaired.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::services::ServiceWatch;
use super::{Cancelled, Run};
use crate::workflow::evacuation;
use crate::workflow::stall::{self, Records, Stall};
use openstack_client::nova::{ComputeService, InstanceAction, Migration, Server};

/// An evacuation Nova lost, to be repaired.
#[derive(Clone, Debug)]
pub(super) struct Lost {
    /// What Nova shows, and what proves no earlier request can still spawn
    /// a guest.
    pub reason: String,
    pub migration_id: i64,
    /// Where the lost evacuation went, if known: never evacuated to again
    /// while it is down.
    pub destination: Option<String>,
}

/// What a judgement means for the following.
pub(super) enum Judged {
    /// Nothing to say: follow on.
    Moving,
    /// Follow on; the text says what Nova shows (and why it is not
    /// repaired).
    Waiting(String),
    Lost(Lost),
}

/// What of the server and its migration the engine watches change.
type Seen = (
    Option<String>,
    String,
    Option<String>,
    Option<i64>,
    String,
    Option<String>,
);

/// One evacuation's stall, as a run sees it: the instance action as last
/// read, the judgements already reported, and (following) since when the
/// records were seen unchanged.
pub(super) struct StallWatch {
    request_id: Option<String>,
    action: Option<(i64, InstanceAction)>,
    read_at: Option<Instant>,
    reported: Option<String>,
    /// `None` when judging by Nova's timestamps alone.
    watched: Option<(Option<Seen>, DateTime<Utc>)>,
}

impl StallWatch {
    /// For a recover run following the evacuation from `now`;
    /// `request_id`: the evacuate request's id, when its answer came.
    pub fn following(request_id: Option<&str>, now: DateTime<Utc>) -> Self {
        Self {
            request_id: request_id.map(str::to_owned),
            action: None,
            read_at: None,
            reported: None,
            watched: Some((None, now)),
        }
    }

    /// For a reconcile run: Nova's timestamps alone.
    pub fn judging() -> Self {
        Self {
            request_id: None,
            action: None,
            read_at: None,
            reported: None,
            watched: None,
        }
    }

    /// Notes what the records show now; the time they were first seen so.
    fn watch(
        &mut self,
        server: &Server,
        m: &Migration,
        now: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let seen: Seen = (
            server.task_state.clone(),
            server.vm_state().to_owned(),
            server.host.clone(),
            server.power_state,
            m.status.clone(),
            m.dest_compute.clone(),
        );
        let (last, since) = self.watched.as_mut()?;
        if last.as_ref() != Some(&seen) {
            if last.is_some() {
                *since = now;
            }
            *last = Some(seen);
        }
        Some(*since)
    }

    /// The action read for migration `id`, if any.
    fn action_of(&self, id: i64) -> Option<&InstanceAction> {
        self.action
            .as_ref()
            .filter(|(m, _)| *m == id)
            .map(|(_, a)| a)
    }
}

impl Run {
    /// Judges an evacuation in flight (`m`, the server as last read),
    /// reading its action and its destination's service when it has gone
    /// quiet; a loss is confirmed on fresh records before it is returned.
    /// Each judgement is reported once as a step.
    pub(super) async fn judge_quiet(
        &self,
        id: &str,
        source: &str,
        server: &Server,
        m: &Migration,
        services: &ServiceWatch,
        watch: &mut StallWatch,
    ) -> Result<Judged, Cancelled> {
        let (stall, quiet) = self.look(id, source, server, m, services, watch).await?;
        Ok(match stall {
            Stall::Proceeding | Stall::ReadAction => Judged::Moving,
            Stall::Unproven(text) => {
                if quiet >= self.settings().stalled_evacuation_after {
                    self.report_once(id, watch, &text.clone(), text.clone());
                }
                Judged::Waiting(text)
            }
            Stall::AwaitFencing { host, reason } => {
                let text = format!(
                    "{reason}; waiting for {host} to be reported failed and fenced (its nova-compute forced down) \
                     before evacuating it again"
                );
                self.report_once(id, watch, &format!("fencing of {host}"), text.clone());
                Judged::Waiting(text)
            }
            Stall::Repair(_) => match self.confirm_lost(id, source, m.id, watch).await? {
                Some(lost) => Judged::Lost(lost),
                None => Judged::Moving,
            },
        })
    }

    /// The stall judgement of an evacuation in flight, and how long its
    /// records have been quiet: once quiet, its action is read (at most
    /// once per look interval) and its destination's service taken from
    /// `services`.
    pub(super) async fn look(
        &self,
        id: &str,
        source: &str,
        server: &Server,
        m: &Migration,
        services: &ServiceWatch,
        watch: &mut StallWatch,
    ) -> Result<(Stall, Duration), Cancelled> {
        let watched_since = watch.watch(server, m, self.now());
        let stall = stall::assess(&self.records(
            source,
            server,
            m,
            watch.action_of(m.id),
            None,
            watched_since,
        ));
        if stall == Stall::Proceeding {
            return Ok((stall, Duration::ZERO));
        }
        let look = self.look_interval();
        if watch.read_at.is_none_or(|at| at.elapsed() >= look) || watch.action_of(m.id).is_none() {
            watch.read_at = Some(Instant::now());
            if let Some(action) = self
                .evacuation_action(id, m, watch.request_id.as_deref())
                .await?
            {
                watch.action = Some((m.id, action));
            }
        }
        let action = watch.action_of(m.id);
        let destination = match stall::destination(m, action) {
            Some(host) => self.or_cancel(services.service(&host)).await?,
            None => None,
        };
        let records = self.records(
            source,
            server,
            m,
            action,
            destination.as_ref(),
            watched_since,
        );
        Ok((stall::assess(&records), stall::quiet_for(&records)))
    }

    /// Reads the evacuation's records afresh (server, migration `migration_id`,
    /// action, destination service) and judges again: the loss if they
    /// still prove it.
    pub(super) async fn confirm_lost(
        &self,
        id: &str,
        source: &str,
        migration_id: i64,
        watch: &mut StallWatch,
    ) -> Result<Option<Lost>, Cancelled> {
        let request_id = watch.request_id.clone();
        let request_id = request_id.as_deref();
        let Ok(migrations) = self.or_cancel(self.openstack().evacuations_of(id)).await? else {
            return Ok(None);
        };
        let Some(m) = migrations.into_iter().find(|m| m.id == migration_id) else {
            return Ok(None);
        };
        let action = self.evacuation_action(id, &m, request_id).await?;
        let host = stall::destination(&m, action.as_ref());
        let destination = match &host {
            Some(host) => match self
                .or_cancel(self.openstack().compute_service(host))
                .await?
            {
                Ok(service) => service,
                Err(_) => return Ok(None),
            },
            None => None,
        };
        // The server last, just before the repair's reset: the narrowest
        // window for a rebuild to move on unseen.
        let Ok(server) = self.or_cancel(self.openstack().server(id)).await? else {
            return Ok(None);
        };
        let watched_since = watch.watch(&server, &m, self.now());
        let records = self.records(
            source,
            &server,
            &m,
            action.as_ref(),
            destination.as_ref(),
            watched_since,
        );
        Ok(match stall::assess(&records) {
            Stall::Repair(reason) => Some(Lost {
                reason,
                migration_id,
                destination: host,
            }),
            _ => None,
        })
    }

    /// The `evacuate` action that made migration `m`, with its events: by
    /// the request's id when known, else matched by time; `None` if Nova
    /// cannot be read.
    pub(super) async fn evacuation_action(
        &self,
        id: &str,
        m: &Migration,
        request_id: Option<&str>,
    ) -> Result<Option<InstanceAction>, Cancelled> {
        let openstack = self.openstack();
        if let Some(request_id) = request_id
            && let Ok(action) = self
                .or_cancel(openstack.instance_action(id, request_id))
                .await?
        {
            return Ok(Some(action));
        }
        let actions = match self.or_cancel(openstack.instance_actions(id)).await? {
            Ok(actions) => actions,
            Err(e) => {
                tracing::warn!(instance_id = %id, error = %e, "cannot read the instance's actions");
                return Ok(None);
            }
        };
        let Some(found) = stall::action_of(&actions, m) else {
            return Ok(None);
        };
        Ok(self
            .or_cancel(openstack.instance_action(id, &found.request_id))
            .await?
            .ok())
    }

    /// What Nova shows of the instance's newest evacuation away from
    /// `source`, read now (the watch may lag behind Nova): `fallback` if
    /// there is none or it cannot be read.
    pub(super) async fn migration_state(
        &self,
        id: &str,
        source: &str,
        fallback: &str,
    ) -> Result<String, Cancelled> {
        let Ok(migrations) = self.or_cancel(self.openstack().evacuations_of(id)).await? else {
            return Ok(fallback.to_owned());
        };
        Ok(
            match migrations
                .iter()
                .find(|m| m.source_compute.as_deref() == Some(source))
            {
                Some(m) => format!("migration {}", evacuation::describe(m)),
                None => fallback.to_owned(),
            },
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn records<'a>(
        &self,
        source: &'a str,
        server: &'a Server,
        migration: &'a Migration,
        action: Option<&'a InstanceAction>,
        destination: Option<&'a ComputeService>,
        watched_since: Option<DateTime<Utc>>,
    ) -> Records<'a> {
        Records {
            source,
            server,
            migration,
            action,
            destination,
            now: self.now(),
            watched_since,
            stalled_after: self.settings().stalled_evacuation_after,
        }
    }

    /// How often a quiet evacuation's action is read again.
    fn look_interval(&self) -> Duration {
        self.settings().stalled_evacuation_after / stall::LOOK_DIVISOR
    }

    /// Reports `text` as a `verify` step, unless what `key` names was
    /// reported last.
    fn report_once(&self, id: &str, watch: &mut StallWatch, key: &str, text: String) {
        if watch.reported.as_deref() != Some(key) {
            self.reporter.step(id, "verify", text);
            watch.reported = Some(key.to_owned());
        }
    }
}
