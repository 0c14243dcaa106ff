//! `instanceha segment ...`: failover segments (Masakari's
//! `openstack segment create|list|show|update|delete`).

use clap::{Args, Subcommand};

use super::{Context, Paging, fetch_pages, segment_id};
use crate::error::{Error, Exit};
use crate::output::Tabular as _;
use crate::resources::{
    NewSegment, RecoveryMethod, ReturnToService, Segment, SegmentChanges, SegmentFilter,
};

#[derive(Subcommand, Debug)]
pub enum SegmentCommand {
    /// Create a failover segment
    Create(CreateArgs),
    /// List failover segments
    List(ListArgs),
    /// Show one failover segment
    Show {
        /// The segment's ID or name
        segment: String,
    },
    /// Change a failover segment (refused while one of its notifications is
    /// new, running or error)
    Update(UpdateArgs),
    /// Delete a failover segment and its hosts (refused while one of its
    /// notifications is new, running or error)
    Delete {
        /// The segment's ID or name
        segment: String,
    },
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    /// The segment's name (unique)
    pub name: String,
    /// How the instances of a failed host are recovered
    #[arg(long, value_enum)]
    pub recovery_method: RecoveryMethod,
    /// The service type
    #[arg(long, default_value = "COMPUTE")]
    pub service_type: String,
    /// Free text
    #[arg(long)]
    pub description: Option<String>,
    /// Create it disabled: its notifications are stored as ignored
    #[arg(long)]
    pub disabled: bool,
    /// What becomes of a fenced host that comes back healthy: it waits
    /// for `host restore` (manual, the default) or its STARTED report
    /// brings it back once its nova-compute reports (auto)
    #[arg(long, value_enum)]
    pub return_to_service: Option<ReturnToService>,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Only segments with this recovery method
    #[arg(long, value_enum)]
    pub recovery_method: Option<RecoveryMethod>,
    /// Only segments with this service type
    #[arg(long)]
    pub service_type: Option<String>,
    /// Only enabled (true) or disabled (false) segments
    #[arg(long, value_name = "true|false")]
    pub enabled: Option<bool>,
    /// Only the segment with this name
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub paging: Paging,
}

#[derive(Args, Debug)]
pub struct UpdateArgs {
    /// The segment's ID or name
    pub segment: String,
    #[command(flatten)]
    pub changes: ChangeArgs,
}

#[derive(Args, Debug)]
#[group(required = true, multiple = true)]
pub struct ChangeArgs {
    /// A new name
    #[arg(long)]
    pub name: Option<String>,
    /// A new description
    #[arg(long)]
    pub description: Option<String>,
    /// A new recovery method
    #[arg(long, value_enum)]
    pub recovery_method: Option<RecoveryMethod>,
    /// A new service type
    #[arg(long)]
    pub service_type: Option<String>,
    /// Enable the segment
    #[arg(long, conflicts_with = "disable")]
    pub enable: bool,
    /// Disable the segment: its new notifications are stored as ignored
    #[arg(long)]
    pub disable: bool,
    /// What becomes of a fenced host that comes back healthy (manual or auto)
    #[arg(long, value_enum)]
    pub return_to_service: Option<ReturnToService>,
}

impl ChangeArgs {
    fn changes(self) -> SegmentChanges {
        SegmentChanges {
            name: self.name,
            description: self.description,
            service_type: self.service_type,
            recovery_method: self.recovery_method,
            enabled: match (self.enable, self.disable) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            },
            return_to_service: self.return_to_service,
        }
    }
}

pub async fn run(command: SegmentCommand, ctx: &mut Context) -> Result<Exit, Error> {
    ctx.check_columns(match &command {
        SegmentCommand::List(_) => Segment::COLUMNS,
        _ => Segment::FIELDS,
    })?;
    let client = ctx.client()?;
    match command {
        SegmentCommand::Create(args) => {
            let segment = client
                .create_segment(NewSegment {
                    name: args.name,
                    description: args.description,
                    service_type: args.service_type,
                    recovery_method: args.recovery_method,
                    enabled: !args.disabled,
                    return_to_service: args.return_to_service,
                })
                .await?;
            ctx.print_one(&segment)
        }
        SegmentCommand::List(args) => {
            let filter = SegmentFilter {
                recovery_method: args.recovery_method,
                service_type: args.service_type,
                enabled: args.enabled,
                name: args.name,
            };
            let listed = fetch_pages(&args.paging, |size, token| {
                client.list_segments(&filter, size, token)
            })
            .await?;
            ctx.print_list("segment", listed)
        }
        SegmentCommand::Show { segment } => {
            let id = segment_id(&client, &segment).await?;
            let segment = client.get_segment(&id).await?;
            ctx.print_one(&segment)
        }
        SegmentCommand::Update(args) => {
            let id = segment_id(&client, &args.segment).await?;
            let segment = client.update_segment(&id, args.changes.changes()).await?;
            ctx.print_one(&segment)
        }
        SegmentCommand::Delete { segment } => {
            let id = segment_id(&client, &segment).await?;
            client.delete_segment(&id).await?;
            ctx.print_deleted("segment", &id)
        }
    }
}
