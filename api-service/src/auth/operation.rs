//! Every operation of the public API, with what it needs: the action the
//! roles are checked against, its gRPC path and its Masakari policy name.
//! The one table both transports read: the gRPC guard looks operations up
//! by path, the REST handlers name theirs.

use super::Action;

/// An operation of the public API, on either transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    CreateSegment,
    GetSegment,
    ListSegments,
    UpdateSegment,
    DeleteSegment,
    CreateHost,
    GetHost,
    ListHosts,
    UpdateHost,
    DeleteHost,
    /// Bring a repaired host back to service (gRPC only).
    RestoreHost,
    CreateNotification,
    GetNotification,
    ListNotifications,
    WatchNotification,
    /// Recover a failed notification again (gRPC only).
    RetryNotification,
    GetVmove,
    ListVmoves,
    /// Masakari's `GET /` and `GET /v1` (REST only).
    ListVersions,
}

impl Operation {
    pub const ALL: [Operation; 19] = [
        Self::CreateSegment,
        Self::GetSegment,
        Self::ListSegments,
        Self::UpdateSegment,
        Self::DeleteSegment,
        Self::CreateHost,
        Self::GetHost,
        Self::ListHosts,
        Self::UpdateHost,
        Self::DeleteHost,
        Self::RestoreHost,
        Self::CreateNotification,
        Self::GetNotification,
        Self::ListNotifications,
        Self::WatchNotification,
        Self::RetryNotification,
        Self::GetVmove,
        Self::ListVmoves,
        Self::ListVersions,
    ];

    /// Its name in the policy file: the gRPC method's (`ListVersions` for
    /// REST's `GET /v1`).
    pub fn name(self) -> String {
        format!("{self:?}")
    }

    /// What it does: its default rule (`policy::default_roles`).
    pub fn action(self) -> Action {
        match self {
            Self::GetSegment
            | Self::ListSegments
            | Self::GetHost
            | Self::ListHosts
            | Self::GetNotification
            | Self::ListNotifications
            | Self::WatchNotification
            | Self::GetVmove
            | Self::ListVmoves
            | Self::ListVersions => Action::Read,
            Self::CreateNotification => Action::CreateNotification,
            Self::CreateSegment
            | Self::UpdateSegment
            | Self::DeleteSegment
            | Self::CreateHost
            | Self::UpdateHost
            | Self::DeleteHost
            | Self::RestoreHost
            | Self::RetryNotification => Action::Administer,
        }
    }

    /// The gRPC path, `/instanceha.v1.Service/Method`; `None` for an
    /// operation only the REST facade has.
    pub fn grpc_path(self) -> Option<&'static str> {
        Some(match self {
            Self::CreateSegment => "/instanceha.v1.SegmentService/CreateSegment",
            Self::GetSegment => "/instanceha.v1.SegmentService/GetSegment",
            Self::ListSegments => "/instanceha.v1.SegmentService/ListSegments",
            Self::UpdateSegment => "/instanceha.v1.SegmentService/UpdateSegment",
            Self::DeleteSegment => "/instanceha.v1.SegmentService/DeleteSegment",
            Self::CreateHost => "/instanceha.v1.HostService/CreateHost",
            Self::GetHost => "/instanceha.v1.HostService/GetHost",
            Self::ListHosts => "/instanceha.v1.HostService/ListHosts",
            Self::UpdateHost => "/instanceha.v1.HostService/UpdateHost",
            Self::DeleteHost => "/instanceha.v1.HostService/DeleteHost",
            Self::RestoreHost => "/instanceha.v1.HostService/RestoreHost",
            Self::CreateNotification => "/instanceha.v1.NotificationService/CreateNotification",
            Self::GetNotification => "/instanceha.v1.NotificationService/GetNotification",
            Self::ListNotifications => "/instanceha.v1.NotificationService/ListNotifications",
            Self::WatchNotification => "/instanceha.v1.NotificationService/WatchNotification",
            Self::RetryNotification => "/instanceha.v1.NotificationService/RetryNotification",
            Self::GetVmove => "/instanceha.v1.VmoveService/GetVmove",
            Self::ListVmoves => "/instanceha.v1.VmoveService/ListVmoves",
            Self::ListVersions => return None,
        })
    }

    /// Masakari's policy name, quoted when the REST facade refuses a call;
    /// `None` for an operation only gRPC has.
    pub fn masakari_policy(self) -> Option<&'static str> {
        Some(match self {
            Self::CreateSegment => "os_masakari_api:segments:create",
            Self::GetSegment => "os_masakari_api:segments:detail",
            Self::ListSegments => "os_masakari_api:segments:index",
            Self::UpdateSegment => "os_masakari_api:segments:update",
            Self::DeleteSegment => "os_masakari_api:segments:delete",
            Self::CreateHost => "os_masakari_api:os-hosts:create",
            Self::GetHost => "os_masakari_api:os-hosts:detail",
            Self::ListHosts => "os_masakari_api:os-hosts:index",
            Self::UpdateHost => "os_masakari_api:os-hosts:update",
            Self::DeleteHost => "os_masakari_api:os-hosts:delete",
            Self::CreateNotification => "os_masakari_api:notifications:create",
            Self::GetNotification => "os_masakari_api:notifications:detail",
            Self::ListNotifications => "os_masakari_api:notifications:index",
            Self::GetVmove => "os_masakari_api:vmoves:detail",
            Self::ListVmoves => "os_masakari_api:vmoves:index",
            Self::ListVersions => "os_masakari_api:versions:index",
            Self::WatchNotification | Self::RetryNotification | Self::RestoreHost => return None,
        })
    }

    /// The operation served at a gRPC path.
    pub fn of_grpc_path(path: &str) -> Option<Operation> {
        Self::ALL
            .into_iter()
            .find(|op| op.grpc_path() == Some(path))
    }

    /// The operations with a gRPC method.
    pub fn grpc() -> impl Iterator<Item = Operation> {
        Self::ALL.into_iter().filter(|op| op.grpc_path().is_some())
    }
}

/// What a gRPC call is, by its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrpcCall {
    /// Health (for probes) or reflection (for discovery): anyone's.
    Open,
    /// An operation of the table.
    Operation(Operation),
    /// A path the table does not know: the admin's.
    Unknown,
}

/// What the gRPC call at `path` is.
pub fn grpc_call(path: &str) -> GrpcCall {
    if OPEN_SERVICES.iter().any(|service| {
        path.strip_prefix(service)
            .is_some_and(|m| m.starts_with('/'))
    }) {
        return GrpcCall::Open;
    }
    Operation::of_grpc_path(path).map_or(GrpcCall::Unknown, GrpcCall::Operation)
}

/// Services anyone may call.
const OPEN_SERVICES: [&str; 3] = [
    "/grpc.health.v1.Health",
    "/grpc.reflection.v1.ServerReflection",
    "/grpc.reflection.v1alpha.ServerReflection",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_has_a_path_or_a_policy_and_paths_are_unique() {
        for op in Operation::ALL {
            assert!(
                op.grpc_path().is_some() || op.masakari_policy().is_some(),
                "{op:?}"
            );
            if let Some(path) = op.grpc_path() {
                assert_eq!(Operation::of_grpc_path(path), Some(op));
            }
        }
        assert_eq!(Operation::grpc().count(), 18);
    }

    #[test]
    fn every_rpc_is_found_by_its_path() {
        for op in Operation::grpc() {
            assert_eq!(
                grpc_call(op.grpc_path().unwrap()),
                GrpcCall::Operation(op),
                "{op:?}"
            );
            assert!(
                op.grpc_path()
                    .unwrap()
                    .ends_with(&format!("/{}", op.name()))
            );
        }
        assert_eq!(grpc_call("/grpc.health.v1.Health/Check"), GrpcCall::Open);
        assert_eq!(
            grpc_call("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"),
            GrpcCall::Open
        );
        assert_eq!(
            grpc_call("/grpc.health.v1.HealthX/Check"),
            GrpcCall::Unknown
        );
        assert_eq!(grpc_call("/something.Else/Method"), GrpcCall::Unknown);
    }

    #[test]
    fn every_operation_has_its_action() {
        use Action::*;
        for op in Operation::ALL {
            let expected = match op.name().as_str() {
                "CreateNotification" => CreateNotification,
                name if name.starts_with("Get")
                    || name.starts_with("List")
                    || name.starts_with("Watch") =>
                {
                    Read
                }
                _ => Administer,
            };
            assert_eq!(op.action(), expected, "{op:?}");
        }
    }
}
