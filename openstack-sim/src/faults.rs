//! Fault injection: rules that match calls by service, method, path pattern, action and server,
//! and make them fail, slow down, drop the connection or hang, for N calls, with a probability,
//! or for an *outage window* of simulated time (`for_secs`): a service refusing connections
//! (`drop`), answering 503 or hanging for a set duration, then serving again on its own.

use rand::{Rng, SeedableRng, rngs::StdRng};
use serde::{Deserialize, Serialize};

use crate::pattern::wildcard_match;

/// Why a fault rule was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("invalid fault rule: {0}")]
    Invalid(String),
}

/// Which API a rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FaultService {
    Identity,
    Compute,
    Volume,
    #[default]
    Any,
}

/// The body of an injected error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ErrorBody {
    /// The service's own JSON envelope.
    #[default]
    Json,
    /// A load balancer's HTML page.
    Html,
}

/// What a matching call suffers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FaultEffect {
    /// Answer with this status and a real error body instead of serving the call.
    Error {
        status: u16,
        #[serde(default)]
        body: ErrorBody,
        #[serde(default)]
        message: Option<String>,
        #[serde(default)]
        retry_after: Option<u32>,
    },
    /// Serve the call after this many real milliseconds.
    Latency { ms: u64 },
    /// Close the TCP connection without answering.
    Drop,
    /// Never answer.
    Hang,
}

/// A fault rule as requested.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultRule {
    #[serde(default)]
    pub service: FaultService,
    /// HTTP method; any when absent.
    #[serde(default)]
    pub method: Option<String>,
    /// Path relative to the service root (`/servers/detail`, `/volumes/*/action`, `/auth/tokens`),
    /// `*` matching anything; any when absent.
    #[serde(default)]
    pub path: Option<String>,
    /// Server or volume action name (`evacuate`, `os-force_detach`, ...).
    #[serde(default)]
    pub action: Option<String>,
    /// Only calls about this server (its id in the path).
    #[serde(default)]
    pub instance_id: Option<String>,
    pub effect: FaultEffect,
    /// Apply to the next N matching calls, then expire.
    #[serde(default)]
    pub times: Option<u32>,
    /// Apply to each matching call with this probability (seeded).
    #[serde(default)]
    pub probability: Option<f64>,
    /// An outage window: apply for this many simulated seconds from the moment the rule is
    /// installed, then expire (on a paused Tokio runtime, minutes of outage cost no real time).
    #[serde(default)]
    pub for_secs: Option<f64>,
    /// The outage window opens at the first matching call instead of at installation (an
    /// outage that strikes a step of a recovery whenever the recovery reaches it).
    #[serde(default)]
    pub from_first_call: bool,
}

impl FaultRule {
    /// A rule for every call to a service matching a method and path.
    pub fn new(
        service: FaultService,
        method: Option<&str>,
        path: Option<&str>,
        effect: FaultEffect,
    ) -> FaultRule {
        FaultRule {
            service,
            method: method.map(str::to_string),
            path: path.map(str::to_string),
            action: None,
            instance_id: None,
            effect,
            times: None,
            probability: None,
            for_secs: None,
            from_first_call: false,
        }
    }

    /// An outage of `service` (every call to it) suffering `effect` for `secs` simulated
    /// seconds from installation.
    pub fn outage(service: FaultService, effect: FaultEffect, secs: f64) -> FaultRule {
        FaultRule::new(service, None, None, effect).for_secs(secs)
    }

    /// Expire the rule `secs` simulated seconds after it is installed.
    pub fn for_secs(mut self, secs: f64) -> FaultRule {
        self.for_secs = Some(secs);
        self
    }

    /// Open the outage window at the first matching call.
    pub fn from_first_call(mut self) -> FaultRule {
        self.from_first_call = true;
        self
    }

    pub fn times(mut self, n: u32) -> FaultRule {
        self.times = Some(n);
        self
    }

    pub fn probability(mut self, p: f64) -> FaultRule {
        self.probability = Some(p);
        self
    }

    pub fn action(mut self, action: &str) -> FaultRule {
        self.action = Some(action.into());
        self
    }

    pub fn instance(mut self, instance_id: &str) -> FaultRule {
        self.instance_id = Some(instance_id.into());
        self
    }

    fn validate(&self) -> Result<(), Error> {
        if let Some(p) = self.probability
            && !(0.0..=1.0).contains(&p)
        {
            return Err(Error::Invalid("probability must be in [0, 1]".into()));
        }
        if let FaultEffect::Error { status, .. } = self.effect
            && !(400..=599).contains(&status)
        {
            return Err(Error::Invalid("error status must be 4xx or 5xx".into()));
        }
        if self.times == Some(0) {
            return Err(Error::Invalid("times must be positive".into()));
        }
        if let Some(secs) = self.for_secs
            && !(secs.is_finite() && secs > 0.0)
        {
            return Err(Error::Invalid(format!(
                "for_secs must be a positive number of seconds, not {secs}"
            )));
        }
        if self.from_first_call && self.for_secs.is_none() {
            return Err(Error::Invalid(
                "from_first_call opens an outage window: it needs for_secs".into(),
            ));
        }
        Ok(())
    }
}

/// An installed rule with its id and how often it fired.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstalledFault {
    pub id: u64,
    #[serde(flatten)]
    pub rule: FaultRule,
    /// Calls still to be affected (when `times` was given).
    pub remaining: Option<u32>,
    /// The simulated time (seconds) at which an outage window ends (for a window opened by
    /// the first matching call, known from that call on).
    pub until: Option<f64>,
    /// The outage window is over: the rule no longer applies, and stays listed with its hits
    /// (how many calls the outage struck) until deleted.
    #[serde(default)]
    pub ended: bool,
    pub hits: u64,
}

/// What the server knows about a call when it decides whether a rule applies.
#[derive(Debug, Clone)]
pub struct CallFacts<'a> {
    pub service: FaultService,
    pub method: &'a str,
    pub path: &'a str,
    pub action: Option<&'a str>,
    pub instance_id: Option<&'a str>,
}

/// The installed rules.
#[derive(Debug)]
pub struct FaultSet {
    rules: Vec<InstalledFault>,
    next_id: u64,
    rng: StdRng,
}

impl FaultSet {
    pub fn new(seed: u64) -> FaultSet {
        FaultSet {
            rules: Vec::new(),
            next_id: 1,
            rng: StdRng::seed_from_u64(seed ^ 0x5eed_fa17),
        }
    }

    /// Installs `rule` at simulated time `now` (seconds).
    pub fn add(&mut self, rule: FaultRule, now: f64) -> Result<u64, Error> {
        rule.validate()?;
        let id = self.next_id;
        self.next_id += 1;
        self.rules.push(InstalledFault {
            id,
            remaining: rule.times,
            until: rule
                .for_secs
                .filter(|_| !rule.from_first_call)
                .map(|secs| now + secs),
            rule,
            ended: false,
            hits: 0,
        });
        Ok(id)
    }

    /// The rules at simulated time `now`: those in force and the ended outage windows.
    pub fn list(&mut self, now: f64) -> Vec<InstalledFault> {
        self.expire(now);
        self.rules.clone()
    }

    /// Marks the outage windows that ended by `now`.
    fn expire(&mut self, now: f64) {
        for rule in &mut self.rules {
            if rule.until.is_some_and(|until| now >= until) {
                rule.ended = true;
            }
        }
    }

    pub fn remove(&mut self, id: u64) -> bool {
        let before = self.rules.len();
        self.rules.retain(|r| r.id != id);
        self.rules.len() != before
    }

    pub fn clear(&mut self) {
        self.rules.clear();
    }

    /// No rule in force (ended outage windows do not count).
    pub fn is_empty(&self) -> bool {
        self.rules.iter().all(|r| r.ended)
    }

    /// The first rule that applies to this call at simulated time `now` (counting it), if any.
    pub fn apply(&mut self, call: &CallFacts<'_>, now: f64) -> Option<(u64, FaultEffect)> {
        self.expire(now);
        let mut fired = None;
        for (i, installed) in self.rules.iter_mut().enumerate() {
            if installed.ended {
                continue;
            }
            let rule = &installed.rule;
            let service_ok = rule.service == FaultService::Any || rule.service == call.service;
            let method_ok = rule
                .method
                .as_deref()
                .is_none_or(|m| m.eq_ignore_ascii_case(call.method));
            let path_ok = rule
                .path
                .as_deref()
                .is_none_or(|p| wildcard_match(p, call.path));
            let action_ok = rule
                .action
                .as_deref()
                .is_none_or(|a| Some(a) == call.action);
            let instance_ok = rule
                .instance_id
                .as_deref()
                .is_none_or(|id| Some(id) == call.instance_id);
            if !(service_ok && method_ok && path_ok && action_ok && instance_ok) {
                continue;
            }
            if let Some(p) = rule.probability
                && self.rng.random::<f64>() >= p
            {
                continue;
            }
            installed.hits += 1;
            if installed.until.is_none()
                && let Some(secs) = rule.for_secs
            {
                installed.until = Some(now + secs);
            }
            if let Some(left) = installed.remaining.as_mut() {
                *left -= 1;
            }
            fired = Some((i, installed.id, installed.rule.effect.clone()));
            break;
        }
        let (index, id, effect) = fired?;
        if self.rules[index].remaining == Some(0) {
            self.rules.remove(index);
        }
        Some((id, effect))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call<'a>(path: &'a str, action: Option<&'a str>) -> CallFacts<'a> {
        CallFacts {
            service: FaultService::Compute,
            method: "POST",
            path,
            action,
            instance_id: Some("abc"),
        }
    }

    fn unavailable() -> FaultEffect {
        FaultEffect::Error {
            status: 503,
            body: ErrorBody::Html,
            message: None,
            retry_after: Some(5),
        }
    }

    #[test]
    fn times_expire_the_rule() {
        let mut set = FaultSet::new(1);
        let id = set
            .add(
                FaultRule::new(
                    FaultService::Compute,
                    Some("POST"),
                    Some("/servers/*/action"),
                    unavailable(),
                )
                .times(2),
                0.0,
            )
            .unwrap();
        assert_eq!(
            set.apply(&call("/servers/abc/action", None), 0.0)
                .unwrap()
                .0,
            id
        );
        assert!(
            set.apply(&call("/servers/abc/os-volume_attachments", None), 0.0)
                .is_none()
        );
        assert!(set.apply(&call("/servers/abc/action", None), 0.0).is_some());
        assert!(set.apply(&call("/servers/abc/action", None), 0.0).is_none());
        assert!(set.is_empty());
    }

    #[test]
    fn action_instance_and_service_narrow_the_match() {
        let mut set = FaultSet::new(1);
        set.add(
            FaultRule::new(FaultService::Volume, None, None, FaultEffect::Drop)
                .action("evacuate")
                .instance("abc"),
            0.0,
        )
        .unwrap();
        assert!(
            set.apply(&call("/servers/abc/action", Some("evacuate")), 0.0)
                .is_none(),
            "wrong service"
        );
        set.clear();
        set.add(
            FaultRule::new(FaultService::Any, None, None, FaultEffect::Hang)
                .action("evacuate")
                .instance("zzz"),
            0.0,
        )
        .unwrap();
        assert!(
            set.apply(&call("/servers/abc/action", Some("evacuate")), 0.0)
                .is_none(),
            "wrong server"
        );
        set.clear();
        set.add(
            FaultRule::new(FaultService::Any, None, None, FaultEffect::Hang).action("evacuate"),
            0.0,
        )
        .unwrap();
        assert!(
            set.apply(&call("/servers/abc/action", Some("lock")), 0.0)
                .is_none()
        );
        assert_eq!(
            set.apply(&call("/servers/abc/action", Some("evacuate")), 0.0)
                .unwrap()
                .1,
            FaultEffect::Hang
        );
    }

    #[test]
    fn probability_is_seeded() {
        let fire = |seed| {
            let mut set = FaultSet::new(seed);
            set.add(
                FaultRule::new(FaultService::Any, None, None, FaultEffect::Drop).probability(0.5),
                0.0,
            )
            .unwrap();
            (0..64)
                .map(|_| set.apply(&call("/x", None), 0.0).is_some())
                .collect::<Vec<_>>()
        };
        let a = fire(7);
        assert_eq!(a, fire(7));
        let hits = a.iter().filter(|x| **x).count();
        assert!((16..=48).contains(&hits), "{hits}");
    }

    #[test]
    fn an_outage_window_ends_on_its_own() {
        let mut set = FaultSet::new(1);
        let id = set
            .add(
                FaultRule::outage(FaultService::Compute, unavailable(), 30.0),
                10.0,
            )
            .unwrap();
        assert_eq!(
            set.apply(&call("/servers/abc/action", None), 10.0)
                .unwrap()
                .0,
            id
        );
        assert!(
            set.apply(&call("/servers/abc/action", None), 39.9)
                .is_some()
        );
        assert!(
            set.apply(&call("/servers/abc/action", None), 40.0)
                .is_none()
        );
        assert!(set.is_empty(), "an ended window is not in force");
        let listed = set.list(40.0);
        assert_eq!(
            (listed[0].ended, listed[0].hits),
            (true, 2),
            "an ended window stays listed with the calls it struck"
        );
        assert!(
            set.add(
                FaultRule::outage(FaultService::Compute, unavailable(), 0.0),
                0.0
            )
            .is_err(),
            "an empty window"
        );
    }

    #[test]
    fn bad_rules_are_refused() {
        let mut set = FaultSet::new(1);
        assert!(
            set.add(
                FaultRule::new(FaultService::Any, None, None, FaultEffect::Drop).probability(1.5),
                0.0
            )
            .is_err()
        );
        let bad = FaultEffect::Error {
            status: 200,
            body: ErrorBody::Json,
            message: None,
            retry_after: None,
        };
        assert!(
            set.add(FaultRule::new(FaultService::Any, None, None, bad), 0.0)
                .is_err()
        );
    }
}
