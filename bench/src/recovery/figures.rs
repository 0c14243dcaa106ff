//! What a finished recovery run shows, from the API's records and the
//! simulator's: how each notification and vmove ended (and the problems),
//! the recovery's wall time, the dispatch latency, and each instance's
//! recovery and downtime.

use std::collections::{BTreeMap, HashMap};

use anyhow::anyhow;
use chrono::{DateTime, Utc};
use instanceha_proto::v1 as pb;

use super::{Recovered, secs_between, status_name, timestamp, vmove_status_name};
use crate::sim::{Clock, Stats, World};

/// Per instance, in all, booted from volume, and image-backed (cloud s).
pub(super) type Split = (Vec<f64>, Vec<f64>, Vec<f64>);

/// How many notifications and vmoves ended in each status; each one not
/// finished or succeeded is a problem (the first 50 vmoves named), and so
/// is a count of vmoves other than the `instances` of the scenario.
pub(super) fn statuses(
    vmoves: &[Recovered],
    instances: usize,
    problems: &mut Vec<String>,
) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let mut notification_statuses = BTreeMap::new();
    let mut vmove_statuses = BTreeMap::new();
    for (n, list) in vmoves {
        *notification_statuses
            .entry(status_name(n.status))
            .or_insert(0usize) += 1;
        if n.status != pb::NotificationStatus::Finished as i32 {
            problems.push(format!(
                "notification for {} is {}: {}",
                n.hostname,
                status_name(n.status),
                n.message
            ));
        }
        for v in list {
            *vmove_statuses
                .entry(vmove_status_name(v.status))
                .or_insert(0usize) += 1;
            if v.status != pb::VmoveStatus::Succeeded as i32 && problems.len() < 50 {
                problems.push(format!(
                    "vmove of {} is {}: {}",
                    v.instance_name,
                    vmove_status_name(v.status),
                    v.message
                ));
            }
        }
    }
    let vmove_count: usize = vmoves.iter().map(|(_, l)| l.len()).sum();
    if vmove_count != instances {
        problems.push(format!("{vmove_count} vmoves for {instances} HA instances"));
    }
    (notification_statuses, vmove_statuses)
}

/// Every server not active on a survivor, unlocked, with no task, is a
/// problem (the first ten named).
pub(super) fn misplaced_servers(world: &World, problems: &mut Vec<String>) {
    let mut misplaced = 0;
    for s in &world.instances {
        let on_survivor = s.host.as_deref().is_some_and(|h| h.starts_with("rack-b-"));
        if !(on_survivor && s.vm_state == "active" && s.task_state.is_none() && !s.locked) {
            misplaced += 1;
            if misplaced <= 10 {
                problems.push(format!(
                    "server {} is {} (task {:?}) on {:?}, locked {}",
                    s.name, s.vm_state, s.task_state, s.host, s.locked
                ));
            }
        }
    }
    if misplaced > 10 {
        problems.push(format!("{misplaced} servers not recovered in all"));
    }
}

fn created_at(n: &pb::Notification) -> anyhow::Result<DateTime<Utc>> {
    timestamp(&n.created_at).ok_or_else(|| anyhow!("notification without created_at"))
}

/// Recovery wall time: the first notification created to the last final
/// (cloud s); and each notification's own.
pub(super) fn recovery_wall(
    finals: &[pb::Notification],
    speed: f64,
) -> anyhow::Result<(f64, Vec<f64>)> {
    let mut first_created: Option<DateTime<Utc>> = None;
    let mut last_final: Option<DateTime<Utc>> = None;
    let mut notification_wall = Vec::new();
    for n in finals {
        let c = created_at(n)?;
        let f = timestamp(&n.updated_at).unwrap_or(c);
        first_created = Some(first_created.map_or(c, |x| x.min(c)));
        last_final = Some(last_final.map_or(f, |x| x.max(f)));
        notification_wall.push(secs_between(c, f) * speed);
    }
    let recovery_wall_secs = match (first_created, last_final) {
        (Some(a), Some(b)) => secs_between(a, b) * speed,
        _ => 0.0,
    };
    Ok((recovery_wall_secs, notification_wall))
}

/// Dispatch latency (real ms): created to the first evacuate request of
/// its host; a host without one is a problem.
pub(super) fn dispatch_latency(
    finals: &[pb::Notification],
    stats: &Stats,
    clock: &Clock,
    problems: &mut Vec<String>,
) -> anyhow::Result<Vec<f64>> {
    let mut first_request: HashMap<&str, f64> = HashMap::new();
    for e in &stats.evacuations {
        let at = first_request
            .entry(e.source.as_str())
            .or_insert(e.requested_at);
        *at = at.min(e.requested_at);
    }
    let mut dispatch = Vec::new();
    for n in finals {
        if let Some(at) = first_request.get(n.hostname.as_str()) {
            let seen = clock.wall(*at);
            dispatch.push(secs_between(created_at(n)?, seen) * 1000.0);
        } else {
            problems.push(format!("no evacuation requested for {}", n.hostname));
        }
    }
    Ok(dispatch)
}

/// Per instance: its recovery (vmove start to end) and its downtime
/// (notification created to vmove end).
pub(super) fn per_instance(
    vmoves: &[Recovered],
    world: &World,
    speed: f64,
) -> anyhow::Result<(Split, Split)> {
    let servers: HashMap<&str, &crate::sim::Server> =
        world.instances.iter().map(|s| (s.id.as_str(), s)).collect();
    let mut recovery: Split = (Vec::new(), Vec::new(), Vec::new());
    let mut downtime: Split = (Vec::new(), Vec::new(), Vec::new());
    for (n, list) in vmoves {
        let c = created_at(n)?;
        for v in list {
            let (Some(start), Some(end)) = (timestamp(&v.start_time), timestamp(&v.end_time))
            else {
                continue;
            };
            let bfv = servers
                .get(v.instance_id.as_str())
                .is_some_and(|s| s.image_id.is_none());
            let r = secs_between(start, end) * speed;
            let d = secs_between(c, end) * speed;
            recovery.0.push(r);
            downtime.0.push(d);
            if bfv {
                recovery.1.push(r);
                downtime.1.push(d);
            } else {
                recovery.2.push(r);
                downtime.2.push(d);
            }
        }
    }
    Ok((recovery, downtime))
}
