//! What the console reads, all through the service layer ([`Api`]): the
//! overview's segments, hosts and recoveries, one host's state, and a
//! recovery's instances. Listings are read page by page to their end.

use std::collections::HashMap;
use std::future::Future;

use chrono::{DateTime, Utc};

use super::host_state::{HostFlags, HostReport, HostState, host_state};
use super::timeline::StepRecord;
use crate::domain::{
    Host, HostFilter, MAX_PAGE_SIZE, Notification, NotificationFilter, NotificationId,
    NotificationType, Page, PageRequest, Segment, SegmentFilter, VMove, VMoveFilter, VMoveId,
};
use crate::service::{Api, Error};
use crate::status::NotificationStatus;

/// How many ended recoveries the overview lists below the running ones.
pub const RECENTLY_ENDED: usize = 10;

/// How many running recoveries the overview lists at most (a storm of
/// reports is read in the history, a page at a time).
pub const RUNNING_SHOWN: u32 = 100;

/// How far back (in reports) the overview looks for each host's newest
/// report: the newest page of reports, of any type and of compute-host
/// failures.
const REPORTS_READ: u32 = MAX_PAGE_SIZE;

/// Every item of a listing, page by page.
pub async fn all_pages<T, F, Fut>(mut fetch: F) -> Result<Vec<T>, Error>
where
    F: FnMut(PageRequest) -> Fut,
    Fut: Future<Output = Result<Page<T>, Error>>,
{
    let mut items = Vec::new();
    let mut page = PageRequest::first(MAX_PAGE_SIZE);
    loop {
        let batch = fetch(page).await?;
        items.extend(batch.items);
        match batch.next {
            Some(next) => page.after = Some(next),
            None => return Ok(items),
        }
    }
}

/// A host and what the overview says of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostView {
    pub host: Host,
    pub state: HostState,
}

/// A segment and its hosts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentView {
    pub segment: Segment,
    pub hosts: Vec<HostView>,
}

/// A recovery on the overview: its notification and whether each of its
/// instances is resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryView {
    pub notification: Notification,
    pub resolved: HashMap<VMoveId, bool>,
}

impl RecoveryView {
    /// Instances resolved.
    pub fn done(&self) -> usize {
        self.resolved.values().filter(|r| **r).count()
    }

    /// Instances planned.
    pub fn total(&self) -> usize {
        self.resolved.len()
    }
}

/// Everything the overview shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overview {
    pub segments: Vec<SegmentView>,
    /// Running now (new, running, error), then the last ended, newest
    /// first.
    pub recoveries: Vec<RecoveryView>,
    /// More are running than [`RUNNING_SHOWN`].
    pub more_running: bool,
}

/// The newest reports about each host: of any type, and of compute-host
/// failures.
#[derive(Clone, Debug, Default)]
pub struct Reports {
    last: HashMap<String, DateTime<Utc>>,
    host: HashMap<String, HostReport>,
}

impl Reports {
    /// From listings newest first.
    fn from_newest(any: &[Notification], compute: &[Notification]) -> Self {
        let mut reports = Self::default();
        for n in any {
            reports
                .last
                .entry(n.hostname.clone())
                .or_insert(n.generated_time);
        }
        for n in compute {
            if let Some(report) = HostReport::of(n) {
                reports.host.entry(n.hostname.clone()).or_insert(report);
            }
        }
        reports
    }

    fn state(&self, host: &Host) -> HostState {
        host_state(
            HostFlags::of(host),
            self.host.get(&host.name),
            self.last.get(&host.name).copied(),
        )
    }
}

async fn newest(
    api: &Api,
    filter: NotificationFilter,
    size: u32,
) -> Result<Vec<Notification>, Error> {
    Ok(api
        .list_notifications(filter, PageRequest::first(size))
        .await?
        .items)
}

/// The segments with their hosts and their states.
pub async fn segments(api: &Api) -> Result<(Vec<SegmentView>, Vec<Notification>), Error> {
    let segments = all_pages(|page| api.list_segments(SegmentFilter::default(), page)).await?;
    let hosts = all_pages(|page| api.list_hosts(HostFilter::default(), page)).await?;
    let any = newest(api, NotificationFilter::default(), REPORTS_READ).await?;
    let compute = newest(
        api,
        NotificationFilter {
            notification_type: Some(NotificationType::ComputeHost),
            ..NotificationFilter::default()
        },
        REPORTS_READ,
    )
    .await?;
    let reports = Reports::from_newest(&any, &compute);
    let mut by_segment: HashMap<_, Vec<HostView>> = HashMap::new();
    for host in hosts {
        let state = reports.state(&host);
        by_segment
            .entry(host.segment_id)
            .or_default()
            .push(HostView { host, state });
    }
    let views = segments
        .into_iter()
        .map(|segment| SegmentView {
            hosts: by_segment.remove(&segment.id).unwrap_or_default(),
            segment,
        })
        .collect();
    Ok((views, any))
}

/// One host by name, with its state; `None` once it is gone.
pub async fn host(api: &Api, name: &str) -> Result<Option<HostView>, Error> {
    let filter = HostFilter {
        name: Some(name.to_owned()),
        ..HostFilter::default()
    };
    let Some(host) = api
        .list_hosts(filter, PageRequest::first(1))
        .await?
        .items
        .into_iter()
        .next()
    else {
        return Ok(None);
    };
    let about = NotificationFilter {
        hostname: Some(name.to_owned()),
        ..NotificationFilter::default()
    };
    let any = newest(api, about.clone(), 1).await?;
    let compute = newest(
        api,
        NotificationFilter {
            notification_type: Some(NotificationType::ComputeHost),
            ..about
        },
        1,
    )
    .await?;
    let state = Reports::from_newest(&any, &compute).state(&host);
    Ok(Some(HostView { host, state }))
}

/// Every vmove of a notification, in creation order.
pub async fn vmoves(api: &Api, id: NotificationId) -> Result<Vec<VMove>, Error> {
    all_pages(|page| api.list_vmoves(id, VMoveFilter::default(), page)).await
}

/// The steps the engine reported for a notification's instances
/// (`Api::instance_steps`), oldest first, as `(instance id, step)`.
pub async fn steps(api: &Api, id: NotificationId) -> Result<Vec<(String, StepRecord)>, Error> {
    Ok(api
        .instance_steps(id)
        .await?
        .into_iter()
        .map(|s| {
            (
                s.instance_id,
                StepRecord {
                    step: s.step,
                    message: Some(s.message).filter(|m| !m.is_empty()),
                    at: Some(s.time),
                    attempt: Some(s.attempt),
                },
            )
        })
        .collect())
}

/// A recovery's progress: resolved instances of all.
pub async fn recovery(api: &Api, notification: Notification) -> Result<RecoveryView, Error> {
    let vmoves = vmoves(api, notification.id).await?;
    Ok(RecoveryView {
        resolved: vmoves
            .iter()
            .map(|v| (v.id, v.status().is_resolved()))
            .collect(),
        notification,
    })
}

/// The overview: segments and hosts, the newest [`RUNNING_SHOWN`]
/// recoveries running now and the last [`RECENTLY_ENDED`] ended.
pub async fn overview(api: &Api) -> Result<Overview, Error> {
    let (segments, recent) = segments(api).await?;
    let mut running: Vec<Notification> = Vec::new();
    let mut more_running = false;
    for status in NotificationStatus::UNFINISHED {
        let filter = NotificationFilter {
            status: Some(status),
            ..NotificationFilter::default()
        };
        let page = api
            .list_notifications(filter, PageRequest::first(RUNNING_SHOWN))
            .await?;
        more_running |= page.next.is_some();
        running.extend(page.items);
    }
    running.sort_by_key(|n| std::cmp::Reverse(n.row_id));
    more_running |= running.len() > RUNNING_SHOWN as usize;
    running.truncate(RUNNING_SHOWN as usize);
    let mut shown = running;
    shown.extend(
        recent
            .into_iter()
            .filter(|n| n.status().is_terminal())
            .take(RECENTLY_ENDED),
    );
    shown.sort_by_key(|n| std::cmp::Reverse(n.row_id));
    shown.dedup_by_key(|n| n.id);
    let mut recoveries = Vec::with_capacity(shown.len());
    for notification in shown {
        recoveries.push(recovery(api, notification).await?);
    }
    Ok(Overview {
        segments,
        recoveries,
        more_running,
    })
}
