//! Expanding a scenario into what the world is built from: the generator
//! forms (host and instance groups) into hosts and instances, the built-in
//! users, application credentials and flavors merged in, and every field
//! checked on the way, the first bad one named. One function per part, in
//! the order a part may refer to an earlier one.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{
    AggregateSpec, AppCredentialSpec, BUILTIN_APP_CREDENTIAL_ID, BUILTIN_APP_CREDENTIAL_SECRET,
    Error, FlavorSpec, HostSpec, InstanceSpec, STUCK_ATTACH_STATUSES, Scenario, Settings,
    TASK_STATES, UserSpec, VM_STATES, VolumeSpec, invalid,
};
use crate::pattern::wildcard_match;

fn builtin_users() -> Vec<UserSpec> {
    vec![
        UserSpec::new("admin", "secret", "admin", &["admin", "member", "reader"]),
        UserSpec::new("nova", "secret", "service", &["service", "admin"]),
        UserSpec::new("reader", "secret", "demo", &["reader"]),
        UserSpec::new("demo", "secret", "demo", &["member", "reader"]),
    ]
}

fn builtin_app_credentials() -> Vec<AppCredentialSpec> {
    vec![AppCredentialSpec {
        id: Some(BUILTIN_APP_CREDENTIAL_ID.into()),
        name: "ha-engine".into(),
        user: "admin".into(),
        secret: BUILTIN_APP_CREDENTIAL_SECRET.into(),
    }]
}

fn builtin_flavors() -> Vec<FlavorSpec> {
    [
        ("m1.tiny", 1, 512, 1),
        ("m1.small", 1, 2048, 20),
        ("m1.medium", 2, 4096, 40),
        ("m1.large", 4, 8192, 80),
        ("m1.xlarge", 8, 16384, 160),
    ]
    .into_iter()
    .map(|(name, vcpus, ram_mb, disk_gb)| FlavorSpec {
        name: name.into(),
        vcpus,
        ram_mb,
        disk_gb,
        extra_specs: BTreeMap::new(),
    })
    .collect()
}

/// A scenario with every generator expanded and built-ins merged in: what the world is built from.
#[derive(Clone, Debug)]
pub(crate) struct Expanded {
    pub settings: Settings,
    pub users: Vec<UserSpec>,
    pub application_credentials: Vec<AppCredentialSpec>,
    pub flavors: Vec<FlavorSpec>,
    pub aggregates: Vec<AggregateSpec>,
    pub hosts: Vec<HostSpec>,
    pub instances: Vec<InstanceSpec>,
    pub volumes: Vec<VolumeSpec>,
}

impl Scenario {
    pub(crate) fn expand(&self) -> Result<Expanded, Error> {
        check_settings(&self.settings)?;
        let users = self.users()?;
        let application_credentials = self.application_credentials(&users)?;
        let flavors = self.flavors()?;
        let hosts = self.hosts()?;
        let host_names = check_hosts(&hosts)?;
        let aggregates = self.aggregates(&hosts)?;
        check_zones(&aggregates)?;
        let instances = self.instances(&hosts)?;
        let known = Known {
            host_names: &host_names,
            flavors: &flavors,
            users: &users,
        };
        let instance_names = check_instances(&instances, &known)?;
        self.check_volumes(&instances, &instance_names)?;
        Ok(Expanded {
            settings: self.settings.clone(),
            users,
            application_credentials,
            flavors,
            aggregates,
            hosts,
            instances,
            volumes: self.volumes.clone(),
        })
    }

    /// The built-in users, replaced by name by the scenario's.
    fn users(&self) -> Result<Vec<UserSpec>, Error> {
        let mut users = builtin_users();
        for (i, u) in self.users.iter().enumerate() {
            if u.name.is_empty() {
                return Err(invalid(format!("users[{i}].name"), "must not be empty"));
            }
            if u.project.is_empty() {
                return Err(invalid(format!("users[{i}].project"), "must not be empty"));
            }
            if self.users[..i].iter().any(|o| o.name == u.name) {
                return Err(invalid(
                    format!("users[{i}].name"),
                    format!("duplicate user {:?}", u.name),
                ));
            }
            users.retain(|b| b.name != u.name);
            users.push(u.clone());
        }
        Ok(users)
    }

    /// The built-in application credentials and the scenario's, each of
    /// one of `users`.
    fn application_credentials(&self, users: &[UserSpec]) -> Result<Vec<AppCredentialSpec>, Error> {
        let mut application_credentials = builtin_app_credentials();
        for (i, a) in self.application_credentials.iter().enumerate() {
            if !users.iter().any(|u| u.name == a.user) {
                return Err(invalid(
                    format!("application_credentials[{i}].user"),
                    format!("unknown user {:?}", a.user),
                ));
            }
            if self.application_credentials[..i]
                .iter()
                .any(|o| o.name == a.name && o.user == a.user)
            {
                return Err(invalid(
                    format!("application_credentials[{i}].name"),
                    format!("duplicate application credential {:?}", a.name),
                ));
            }
            application_credentials.retain(|b| !(b.name == a.name && b.user == a.user));
            application_credentials.push(a.clone());
        }
        application_credentials.retain(|a| users.iter().any(|u| u.name == a.user));
        Ok(application_credentials)
    }

    /// The built-in flavors, replaced by name by the scenario's.
    fn flavors(&self) -> Result<Vec<FlavorSpec>, Error> {
        let mut flavors = builtin_flavors();
        for (i, f) in self.flavors.iter().enumerate() {
            if f.name.is_empty() {
                return Err(invalid(format!("flavors[{i}].name"), "must not be empty"));
            }
            if f.vcpus == 0 || f.ram_mb == 0 {
                return Err(invalid(
                    format!("flavors[{i}]"),
                    "vcpus and ram_mb must be positive",
                ));
            }
            flavors.retain(|b| b.name != f.name);
            flavors.push(f.clone());
        }
        Ok(flavors)
    }

    /// The scenario's hosts, then those of its host groups.
    fn hosts(&self) -> Result<Vec<HostSpec>, Error> {
        let mut hosts = self.hosts.clone();
        for (g, group) in self.host_groups.iter().enumerate() {
            if group.count == 0 {
                return Err(invalid(
                    format!("host_groups[{g}].count"),
                    "must be positive",
                ));
            }
            for n in group.start..group.start + group.count {
                let name = format!("{}{:0width$}", group.name_prefix, n, width = group.width);
                let hypervisor_hostname = match group.hypervisor_domain.as_str() {
                    "" => name.clone(),
                    domain => format!("{name}.{domain}"),
                };
                hosts.push(HostSpec {
                    name,
                    hypervisor_hostname: Some(hypervisor_hostname),
                    vcpus: group.vcpus,
                    ram_mb: group.ram_mb,
                    disk_gb: group.disk_gb,
                    enabled: group.enabled,
                    disabled_reason: group.disabled_reason.clone(),
                    ..HostSpec::default()
                });
            }
        }
        Ok(hosts)
    }

    /// The aggregates, their host patterns matched against `hosts`.
    fn aggregates(&self, hosts: &[HostSpec]) -> Result<Vec<AggregateSpec>, Error> {
        let mut aggregates = Vec::new();
        for (i, a) in self.aggregates.iter().enumerate() {
            if self.aggregates[..i].iter().any(|o| o.name == a.name) {
                return Err(invalid(
                    format!("aggregates[{i}].name"),
                    format!("duplicate aggregate {:?}", a.name),
                ));
            }
            let mut members = Vec::new();
            for pattern in &a.hosts {
                let matched: Vec<String> = hosts
                    .iter()
                    .filter(|h| wildcard_match(pattern, &h.name))
                    .map(|h| h.name.clone())
                    .collect();
                if matched.is_empty() {
                    return Err(invalid(
                        format!("aggregates[{i}].hosts"),
                        format!("unknown host {pattern:?}"),
                    ));
                }
                for m in matched {
                    if !members.contains(&m) {
                        members.push(m);
                    }
                }
            }
            aggregates.push(AggregateSpec {
                hosts: members,
                ..a.clone()
            });
        }
        Ok(aggregates)
    }

    /// The scenario's instances, then those of its instance groups, spread
    /// over the hosts each group's pattern matches.
    fn instances(&self, hosts: &[HostSpec]) -> Result<Vec<InstanceSpec>, Error> {
        let mut instances = self.instances.clone();
        for (g, group) in self.instance_groups.iter().enumerate() {
            let matched: Vec<&HostSpec> = hosts
                .iter()
                .filter(|h| wildcard_match(&group.host, &h.name))
                .collect();
            if matched.is_empty() {
                return Err(invalid(
                    format!("instance_groups[{g}].host"),
                    format!("unknown host {:?}", group.host),
                ));
            }
            if !(0.0..=1.0).contains(&group.boot_from_volume_fraction) {
                return Err(invalid(
                    format!("instance_groups[{g}].boot_from_volume_fraction"),
                    "must be in [0, 1]",
                ));
            }
            let total = matched.len() * group.count;
            let width = total.to_string().len().max(3);
            let mut n = 0usize;
            for host in matched {
                for _ in 0..group.count {
                    let f = group.boot_from_volume_fraction;
                    let bfv = ((n + 1) as f64 * f).floor() > (n as f64 * f).floor();
                    n += 1;
                    instances.push(InstanceSpec {
                        name: format!("{}-{:0width$}", group.name_prefix, n),
                        host: host.name.clone(),
                        project: group.project.clone(),
                        user: group.user.clone(),
                        flavor: group.flavor.clone(),
                        vm_state: group.vm_state.clone(),
                        metadata: group.metadata.clone(),
                        ha_enabled: Some(group.ha_enabled),
                        locked: group.locked,
                        boot_from_volume: bfv,
                        stale_attachment: bfv && group.stale_attachments,
                        ..InstanceSpec::default()
                    });
                }
            }
        }
        Ok(instances)
    }

    /// Every volume: a name unique among them and the instances' root
    /// volumes, attached to known instances as its kind allows.
    fn check_volumes(
        &self,
        instances: &[InstanceSpec],
        instance_names: &HashSet<String>,
    ) -> Result<(), Error> {
        let mut volume_names: HashSet<String> = instances
            .iter()
            .filter(|i| i.boot_from_volume)
            .map(|i| format!("{}-root", i.name))
            .collect();
        for (i, v) in self.volumes.iter().enumerate() {
            if v.name.is_empty() {
                return Err(invalid(format!("volumes[{i}].name"), "must not be empty"));
            }
            if !volume_names.insert(v.name.clone()) {
                return Err(invalid(
                    format!("volumes[{i}].name"),
                    format!("duplicate volume {:?}", v.name),
                ));
            }
            check_volume(i, v, instance_names)?;
        }
        Ok(())
    }
}

/// The settings: a positive speed, durations of zero or more,
/// probabilities in [0, 1].
fn check_settings(s: &Settings) -> Result<(), Error> {
    if !(s.speed > 0.0 && s.speed.is_finite()) {
        return Err(invalid("settings.speed", "must be a positive number"));
    }
    for (name, value) in [
        ("service_down_time", s.service_down_time),
        ("report_interval", s.report_interval),
        ("rpc_response_timeout", s.rpc_response_timeout),
        ("stale_attachment_timeout", s.stale_attachment_timeout),
    ] {
        if !(value >= 0.0 && value.is_finite()) {
            return Err(invalid(format!("settings.{name}"), "must be zero or more"));
        }
    }
    if s.report_interval <= 0.0 {
        return Err(invalid("settings.report_interval", "must be positive"));
    }
    for (name, url) in [
        ("settings.instance_ha_url", &s.instance_ha_url),
        ("settings.instance_ha_grpc_url", &s.instance_ha_grpc_url),
    ] {
        if let Some(url) = url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(invalid(name, "must be an http:// or https:// URL"));
        }
    }
    if s.max_limit == 0 {
        return Err(invalid("settings.max_limit", "must be positive"));
    }
    if s.rebuild_concurrency == 0 {
        return Err(invalid("settings.rebuild_concurrency", "must be positive"));
    }
    let d = &s.durations;
    for (name, value) in [
        ("api_latency", d.api_latency),
        ("token_issue", d.token_issue),
        ("schedule", d.schedule),
        ("claim", d.claim),
        ("block_device_mapping", d.block_device_mapping),
        ("spawn", d.spawn),
        ("finish", d.finish),
        ("stop", d.stop),
        ("start", d.start),
        ("host_boot", d.host_boot),
    ] {
        if !(value >= 0.0 && value.is_finite()) {
            return Err(invalid(
                format!("settings.durations.{name}"),
                "must be zero or more",
            ));
        }
    }
    if !(0.0..1.0).contains(&d.jitter) {
        return Err(invalid("settings.durations.jitter", "must be in [0, 1)"));
    }
    let p = &s.failure_probability;
    for (name, value) in [
        ("scheduling", p.scheduling),
        ("claim", p.claim),
        ("compute", p.compute),
    ] {
        if !(0.0..=1.0).contains(&value) {
            return Err(invalid(
                format!("settings.failure_probability.{name}"),
                "must be in [0, 1]",
            ));
        }
    }
    Ok(())
}

/// Every host: a unique name, a reason only when disabled, some capacity.
/// Their names.
fn check_hosts(hosts: &[HostSpec]) -> Result<HashSet<String>, Error> {
    let mut host_names = HashSet::new();
    for (i, h) in hosts.iter().enumerate() {
        if h.name.is_empty() {
            return Err(invalid(format!("hosts[{i}].name"), "must not be empty"));
        }
        if !host_names.insert(h.name.clone()) {
            return Err(invalid(
                format!("hosts[{i}].name"),
                format!("duplicate host {:?}", h.name),
            ));
        }
        if h.enabled && h.disabled_reason.is_some() {
            return Err(invalid(
                format!("hosts[{i}].disabled_reason"),
                "set only for a disabled host",
            ));
        }
        if h.vcpus == 0 || h.ram_mb == 0 {
            return Err(invalid(
                format!("hosts[{i}]"),
                "vcpus and ram_mb must be positive",
            ));
        }
    }
    Ok(host_names)
}

/// A host may be in only one availability zone.
fn check_zones(aggregates: &[AggregateSpec]) -> Result<(), Error> {
    let mut zone_of: HashMap<&str, &str> = HashMap::new();
    for (i, a) in aggregates.iter().enumerate() {
        if let Some(zone) = a.availability_zone.as_deref() {
            for h in &a.hosts {
                if let Some(previous) = zone_of.insert(h, zone)
                    && previous != zone
                {
                    return Err(invalid(
                        format!("aggregates[{i}].availability_zone"),
                        format!("host {h:?} would be in zones {previous:?} and {zone:?}"),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// What an instance may refer to.
struct Known<'a> {
    host_names: &'a HashSet<String>,
    flavors: &'a [FlavorSpec],
    users: &'a [UserSpec],
}

/// Every instance: a unique name, and what [`check_instance`] asks. Their
/// names.
fn check_instances(
    instances: &[InstanceSpec],
    known: &Known<'_>,
) -> Result<HashSet<String>, Error> {
    let mut instance_names = HashSet::new();
    for (i, inst) in instances.iter().enumerate() {
        if inst.name.is_empty() {
            return Err(invalid(format!("instances[{i}].name"), "must not be empty"));
        }
        if !instance_names.insert(inst.name.clone()) {
            return Err(invalid(
                format!("instances[{i}].name"),
                format!("duplicate instance {:?}", inst.name),
            ));
        }
        check_instance(i, inst, known)?;
    }
    Ok(instance_names)
}

/// Instance `i`: a known host, flavor and user, a known vm and task state,
/// a lock reason only when locked, and the stuck-attachment modes only on
/// a boot-from-volume instance that can carry them.
fn check_instance(i: usize, inst: &InstanceSpec, known: &Known<'_>) -> Result<(), Error> {
    let field = |f: &str| format!("instances[{i}].{f} ({:?})", inst.name);
    if !known.host_names.contains(&inst.host) {
        return Err(invalid(
            field("host"),
            format!("unknown host {:?}", inst.host),
        ));
    }
    if !known.flavors.iter().any(|f| f.name == inst.flavor) {
        return Err(invalid(
            field("flavor"),
            format!("unknown flavor {:?}", inst.flavor),
        ));
    }
    if !VM_STATES.contains(&inst.vm_state.as_str()) {
        return Err(invalid(
            field("vm_state"),
            format!("unknown vm_state {:?}", inst.vm_state),
        ));
    }
    if let Some(task) = &inst.task_state
        && !TASK_STATES.contains(&task.as_str())
    {
        return Err(invalid(
            field("task_state"),
            format!("unknown task_state {task:?}"),
        ));
    }
    if let Some(user) = &inst.user
        && !known.users.iter().any(|u| &u.name == user)
    {
        return Err(invalid(field("user"), format!("unknown user {user:?}")));
    }
    if let Some(reason) = &inst.locked_reason
        && (!inst.locked || reason.is_empty() || reason.len() > 255)
    {
        return Err(invalid(
            field("locked_reason"),
            "needs locked = true and 1 to 255 characters",
        ));
    }
    if (inst.stale_attachment || inst.root_attach_status.is_some()) && !inst.boot_from_volume {
        return Err(invalid(
            field("stale_attachment"),
            "needs boot_from_volume = true",
        ));
    }
    if inst.stale_attachment && inst.root_volume_multiattach {
        return Err(invalid(
            field("stale_attachment"),
            "only a non-multiattach volume can carry a stale attachment",
        ));
    }
    if let Some(status) = &inst.root_attach_status
        && !STUCK_ATTACH_STATUSES.contains(&status.as_str())
    {
        return Err(invalid(
            field("root_attach_status"),
            format!("must be one of {STUCK_ATTACH_STATUSES:?}"),
        ));
    }
    Ok(())
}

/// Volume `i`: some size, attached to known instances (to one unless
/// multiattach), the stuck-attachment modes only where they can be.
fn check_volume(i: usize, v: &VolumeSpec, instance_names: &HashSet<String>) -> Result<(), Error> {
    let field = |f: &str| format!("volumes[{i}].{f} ({:?})", v.name);
    if v.size == 0 {
        return Err(invalid(field("size"), "must be positive"));
    }
    for server in &v.attached_to {
        if !instance_names.contains(server) {
            return Err(invalid(
                field("attached_to"),
                format!("unknown instance {server:?}"),
            ));
        }
    }
    if !v.multiattach && v.attached_to.len() > 1 {
        return Err(invalid(
            field("attached_to"),
            "a non-multiattach volume can be attached to one server only",
        ));
    }
    if v.stale_attachment && (v.multiattach || v.attached_to.len() != 1) {
        return Err(invalid(
            field("stale_attachment"),
            "needs a non-multiattach volume attached to one server",
        ));
    }
    if let Some(status) = &v.attach_status {
        if !STUCK_ATTACH_STATUSES.contains(&status.as_str()) {
            return Err(invalid(
                field("attach_status"),
                format!("must be one of {STUCK_ATTACH_STATUSES:?}"),
            ));
        }
        if v.attached_to.is_empty() {
            return Err(invalid(field("attach_status"), "needs attached_to"));
        }
    }
    Ok(())
}
