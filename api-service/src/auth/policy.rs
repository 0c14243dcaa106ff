//! The policy: which roles may call each operation, on both transports
//! (the gRPC guard and Masakari's REST facade read the same one). The
//! defaults follow each operation's action (`Operation::action`):
//! changes to segments and hosts, and `RetryNotification`, are the
//! admin's; reports are the monitoring agent's and the admin's; reads are
//! the admin's, the monitoring agent's and the reader's, and no Keystone
//! role is mapped to the reader unless the operator names one
//! (`auth.roles.reader`), so by default only admins read, as in
//! Masakari's default policy.
//!
//! In the spirit of oslo.policy, an operator overrides operations one by
//! one in a TOML file (`auth.policy_file`): the operation's name (the gRPC
//! method's, `ListSegments`; `ListVersions` for `GET /v1`) or its
//! Masakari policy name (`os_masakari_api:segments:index`), and the roles
//! that may call it:
//!
//! ```toml
//! ListSegments = ["admin", "reader"]
//! "os_masakari_api:notifications:create" = ["admin", "monitoring_agent"]
//! ```
//!
//! The file is checked at start; every error names the operation.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use super::{Action, ConfigError, Operation, Role};

/// The roles allowed to do `action`, by default.
pub fn default_roles(action: Action) -> &'static [Role] {
    match action {
        Action::Read => &[Role::Admin, Role::MonitoringAgent, Role::Reader],
        Action::CreateNotification => &[Role::Admin, Role::MonitoringAgent],
        Action::Administer => &[Role::Admin],
    }
}

/// Who may call what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    rules: HashMap<Operation, BTreeSet<Role>>,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            rules: Operation::ALL
                .into_iter()
                .map(|op| (op, default_roles(op.action()).iter().copied().collect()))
                .collect(),
        }
    }
}

/// The admin alone: for a gRPC method the table does not know.
const ADMIN_ONLY: &[Role] = &[Role::Admin];

impl Policy {
    /// The roles that may call `operation` (`None`: an unknown gRPC
    /// method, the admin's).
    pub fn roles(&self, operation: Option<Operation>) -> BTreeSet<Role> {
        operation
            .and_then(|op| self.rules.get(&op).cloned())
            .unwrap_or_else(|| ADMIN_ONLY.iter().copied().collect())
    }

    /// Whether one of `roles` may call `operation`.
    pub fn allows(&self, operation: Option<Operation>, roles: &BTreeSet<Role>) -> bool {
        !self.roles(operation).is_disjoint(roles)
    }

    /// The defaults with the overrides of the file at `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let fail = |reason: String| ConfigError::PolicyFile {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        Self::parse(&text).map_err(fail)
    }

    /// The defaults with the overrides of `text` (TOML: operation name =
    /// roles).
    pub fn parse(text: &str) -> Result<Self, String> {
        let overrides: BTreeMap<String, toml::Value> =
            toml::from_str(text).map_err(|e| e.to_string())?;
        let mut policy = Self::default();
        let mut set_by: HashMap<Operation, String> = HashMap::new();
        for (name, value) in overrides {
            let operation = Operation::ALL
                .into_iter()
                .find(|op| op.name() == name || op.masakari_policy() == Some(name.as_str()))
                .ok_or_else(|| {
                    format!(
                        "{name}: no such operation (the operations: {})",
                        Operation::ALL
                            .iter()
                            .map(|op| op.name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?;
            if let Some(earlier) = set_by.insert(operation, name.clone()) {
                return Err(format!(
                    "{name}: the operation {} is already set by {earlier}",
                    operation.name()
                ));
            }
            let roles = roles_of(&name, value)?;
            policy.rules.insert(operation, roles);
        }
        Ok(policy)
    }
}

/// The roles of one rule: a non-empty list of role names.
fn roles_of(name: &str, value: toml::Value) -> Result<BTreeSet<Role>, String> {
    let toml::Value::Array(items) = value else {
        return Err(format!(
            "{name}: must be a list of roles (admin, monitoring_agent, reader)"
        ));
    };
    if items.is_empty() {
        return Err(format!(
            "{name}: an empty list would let nobody call it; name at least one role"
        ));
    }
    items
        .into_iter()
        .map(|item| {
            item.as_str()
                .and_then(|role| Role::try_from(role).ok())
                .ok_or_else(|| {
                    format!("{name}: {item} is not a role (admin, monitoring_agent or reader)")
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use Operation::*;
    use Role::*;

    fn set(roles: &[Role]) -> BTreeSet<Role> {
        roles.iter().copied().collect()
    }

    /// Every operation's default rule, one by one.
    #[test]
    fn each_default_rule() {
        let reads = set(&[Admin, MonitoringAgent, Reader]);
        let admin = set(&[Admin]);
        let expected = [
            (CreateSegment, admin.clone()),
            (GetSegment, reads.clone()),
            (ListSegments, reads.clone()),
            (UpdateSegment, admin.clone()),
            (DeleteSegment, admin.clone()),
            (CreateHost, admin.clone()),
            (GetHost, reads.clone()),
            (ListHosts, reads.clone()),
            (UpdateHost, admin.clone()),
            (DeleteHost, admin.clone()),
            (RestoreHost, admin.clone()),
            (CreateNotification, set(&[Admin, MonitoringAgent])),
            (GetNotification, reads.clone()),
            (ListNotifications, reads.clone()),
            (WatchNotification, reads.clone()),
            (RetryNotification, admin.clone()),
            (GetVmove, reads.clone()),
            (ListVmoves, reads.clone()),
            (ListVersions, reads.clone()),
        ];
        assert_eq!(expected.len(), Operation::ALL.len());
        let policy = Policy::default();
        for (operation, roles) in expected {
            assert_eq!(policy.roles(Some(operation)), roles, "{operation:?}");
        }
        assert_eq!(policy.roles(None), admin, "an unknown method");
        assert!(
            !policy.allows(Some(ListSegments), &BTreeSet::new()),
            "no role"
        );
    }

    #[test]
    fn a_file_overrides_operations_by_either_name() {
        let policy = Policy::parse(
            "ListSegments = [\"admin\"]\n\"os_masakari_api:notifications:create\" = [\"monitoring_agent\"]\n",
        )
        .unwrap();
        assert_eq!(policy.roles(Some(ListSegments)), set(&[Admin]));
        assert_eq!(
            policy.roles(Some(CreateNotification)),
            set(&[MonitoringAgent])
        );
        assert_eq!(
            policy.roles(Some(ListHosts)),
            set(&[Admin, MonitoringAgent, Reader]),
            "the others keep their defaults"
        );
    }

    #[test]
    fn errors_name_the_operation() {
        for (text, needle) in [
            (
                "ListSegmentz = [\"admin\"]",
                "ListSegmentz: no such operation",
            ),
            (
                "ListSegments = [\"king\"]",
                "ListSegments: \"king\" is not a role",
            ),
            ("ListSegments = []", "ListSegments: an empty list"),
            ("ListSegments = \"admin\"", "ListSegments: must be a list"),
            (
                "ListSegments = [\"admin\"]\n\"os_masakari_api:segments:index\" = [\"reader\"]",
                "already set by ListSegments",
            ),
        ] {
            let err = Policy::parse(text).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
