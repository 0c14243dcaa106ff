//! A typed, serialisable copy of the whole world for tests, the demo and the control API.

use serde::{Deserialize, Serialize};

use super::World;
use super::evacuation::EvacuationPhase;
use super::model::{Aggregate, Host, Instance, InstanceAction, Migration, Volume};
use crate::identity::{AppCredential, Project, User};

/// A host with the service state Nova would report now.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HostSnapshot {
    #[serde(flatten)]
    pub host: Host,
    /// "up" or "down", as `GET /os-services` reports it.
    pub service_state: String,
    /// `host_status` of servers on this host.
    pub host_status: String,
    /// Seconds since the last heartbeat.
    pub heartbeat_age: Option<f64>,
    pub used_vcpus: u64,
    pub used_ram_mb: u64,
}

/// An evacuation's progress.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EvacuationSnapshot {
    pub migration_id: u64,
    pub instance_id: String,
    pub source: String,
    pub destination: Option<String>,
    pub phase: EvacuationPhase,
    pub frozen: bool,
    pub request_id: String,
}

/// Everything in the world at one simulated moment.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorldSnapshot {
    /// Simulated seconds since the scenario was loaded.
    pub sim_time: f64,
    pub speed: f64,
    pub projects: Vec<Project>,
    pub users: Vec<User>,
    pub application_credentials: Vec<AppCredential>,
    pub hosts: Vec<HostSnapshot>,
    pub aggregates: Vec<Aggregate>,
    /// Newest first.
    pub instances: Vec<Instance>,
    /// Newest first.
    pub volumes: Vec<Volume>,
    pub migrations: Vec<Migration>,
    pub instance_actions: Vec<InstanceAction>,
    pub evacuations: Vec<EvacuationSnapshot>,
}

impl WorldSnapshot {
    pub fn instance_by_name(&self, name: &str) -> Option<&Instance> {
        self.instances.iter().find(|i| i.name == name)
    }

    pub fn instance(&self, id: &str) -> Option<&Instance> {
        self.instances.iter().find(|i| i.id == id)
    }

    pub fn volume_by_name(&self, name: &str) -> Option<&Volume> {
        self.volumes.iter().find(|v| v.name == name)
    }

    pub fn volume(&self, id: &str) -> Option<&Volume> {
        self.volumes.iter().find(|v| v.id == id)
    }

    pub fn host(&self, name: &str) -> Option<&HostSnapshot> {
        self.hosts.iter().find(|h| h.host.name == name)
    }

    pub fn project_id(&self, name: &str) -> Option<&str> {
        self.projects
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.id.as_str())
    }

    /// Migrations of one server, oldest first.
    pub fn migrations_of(&self, instance_id: &str) -> Vec<&Migration> {
        self.migrations
            .iter()
            .filter(|m| m.instance_uuid == instance_id)
            .collect()
    }

    /// Servers currently on a host.
    pub fn instances_on(&self, host: &str) -> Vec<&Instance> {
        self.instances
            .iter()
            .filter(|i| i.host.as_deref() == Some(host))
            .collect()
    }
}

impl World {
    /// Copies the whole world after applying due events.
    pub fn snapshot(&mut self) -> WorldSnapshot {
        let t = self.tick();
        let hosts = (0..self.hosts.len())
            .map(|i| HostSnapshot {
                host: self.hosts[i].clone(),
                service_state: if self.service_is_up(i, t) {
                    "up"
                } else {
                    "down"
                }
                .into(),
                host_status: self.host_status(Some(&self.hosts[i].name), t).into(),
                heartbeat_age: self.last_heartbeat(i, t).map(|hb| t.secs_since(hb)),
                used_vcpus: self.usage[i].0,
                used_ram_mb: self.usage[i].1,
            })
            .collect();
        let mut instance_actions: Vec<InstanceAction> =
            self.actions.values().flatten().cloned().collect();
        instance_actions.sort_by(|a, b| {
            a.start_time
                .cmp(&b.start_time)
                .then(a.request_id.cmp(&b.request_id))
        });
        WorldSnapshot {
            sim_time: t.as_secs_f64(),
            speed: self.clock.speed(),
            projects: self.identity.projects.clone(),
            users: self.identity.users.clone(),
            application_credentials: self.identity.application_credentials.clone(),
            hosts,
            aggregates: self.aggregates.clone(),
            instances: self
                .instance_order
                .iter()
                .map(|id| self.instances[id].clone())
                .collect(),
            volumes: self
                .volume_order
                .iter()
                .map(|id| self.volumes[id].clone())
                .collect(),
            migrations: self.migrations.clone(),
            instance_actions,
            evacuations: self
                .evacuations
                .values()
                .map(|e| EvacuationSnapshot {
                    migration_id: e.migration_id,
                    instance_id: e.instance_id.clone(),
                    source: e.source.clone(),
                    destination: e.dest.clone(),
                    phase: e.phase,
                    frozen: e.frozen,
                    request_id: e.request_id.clone(),
                })
                .collect(),
        }
    }
}
