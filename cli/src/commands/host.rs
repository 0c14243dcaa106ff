//! `instanceha host ...`: the compute hosts of failover segments (Masakari's
//! `openstack segment host create|list|show|update|delete`), and `restore`
//! to bring a repaired host back to service.

use clap::{Args, Subcommand};

use super::{Context, Paging, fetch_pages, host_id, optional_segment_id, segment_id};
use crate::error::{Error, Exit};
use crate::output::Tabular as _;
use crate::resources::{Host, HostChanges, HostFilter, NewHost, Notification};

#[derive(Subcommand, Debug)]
pub enum HostCommand {
    /// Register a compute host in a failover segment
    Create(CreateArgs),
    /// List hosts
    List(ListArgs),
    /// Show one host
    Show(HostRef),
    /// Change a host (refused while a notification of its segment is new,
    /// running or error)
    Update(UpdateArgs),
    /// Delete a host (refused while a notification of its segment is new,
    /// running or error)
    Delete(HostRef),
    /// Bring a repaired host back to service: once its nova-compute
    /// reports, lift its forced-down flag, enable it and clear its
    /// maintenance (and a flapping hold). Recorded as a notification;
    /// refused while one of the host's own is new, running or error
    Restore(RestoreArgs),
}

#[derive(Args, Debug)]
pub struct RestoreArgs {
    #[command(flatten)]
    pub host: HostRef,
    /// Follow the restore until it ends (as `notification watch`)
    #[arg(long)]
    pub watch: bool,
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    /// The nova-compute host name (`OS-EXT-SRV-ATTR:host`); unique
    pub name: String,
    /// The failover segment's ID or name
    #[arg(long)]
    pub segment: String,
    /// The host type (for example COMPUTE)
    #[arg(long = "type", value_name = "TYPE")]
    pub host_type: String,
    /// Free text (Masakari's control_attributes, for example SSH)
    #[arg(long, default_value = "")]
    pub control_attributes: String,
    /// A spare: the reserved_host recovery methods evacuate to it
    #[arg(long)]
    pub reserved: bool,
    /// On maintenance: notifications for it are refused
    #[arg(long)]
    pub on_maintenance: bool,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Only hosts of this segment (ID or name)
    #[arg(long)]
    pub segment: Option<String>,
    /// Only hosts of this type
    #[arg(long = "type", value_name = "TYPE")]
    pub host_type: Option<String>,
    /// Only reserved (true) or unreserved (false) hosts
    #[arg(long, value_name = "true|false")]
    pub reserved: Option<bool>,
    /// Only hosts on (true) or off (false) maintenance
    #[arg(long, value_name = "true|false")]
    pub on_maintenance: Option<bool>,
    /// Only the host with this name
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub paging: Paging,
}

#[derive(Args, Debug)]
pub struct HostRef {
    /// The host's ID or name
    pub host: String,
    /// The segment (ID or name) the host must belong to
    #[arg(long)]
    pub segment: Option<String>,
}

#[derive(Args, Debug)]
pub struct UpdateArgs {
    #[command(flatten)]
    pub host: HostRef,
    #[command(flatten)]
    pub changes: ChangeArgs,
}

#[derive(Args, Debug)]
#[group(required = true, multiple = true)]
pub struct ChangeArgs {
    /// A new name
    #[arg(long)]
    pub name: Option<String>,
    /// A new type
    #[arg(long = "type", value_name = "TYPE")]
    pub host_type: Option<String>,
    /// New control attributes
    #[arg(long)]
    pub control_attributes: Option<String>,
    /// Make it a spare (true) or not (false)
    #[arg(long, value_name = "true|false")]
    pub reserved: Option<bool>,
    /// Put it on (true) or take it off (false) maintenance
    #[arg(long, value_name = "true|false")]
    pub on_maintenance: Option<bool>,
}

impl ChangeArgs {
    fn changes(self) -> HostChanges {
        HostChanges {
            name: self.name,
            host_type: self.host_type,
            control_attributes: self.control_attributes,
            reserved: self.reserved,
            on_maintenance: self.on_maintenance,
        }
    }
}

/// The host's ID and its segment's ID (when `--segment` was given).
async fn resolve(
    client: &crate::client::Client,
    host: &HostRef,
) -> Result<(String, Option<String>), Error> {
    let segment = optional_segment_id(client, host.segment.as_deref()).await?;
    let id = host_id(client, &host.host, segment.as_deref()).await?;
    Ok((id, segment))
}

pub async fn run(command: HostCommand, ctx: &mut Context) -> Result<Exit, Error> {
    ctx.check_columns(match &command {
        HostCommand::List(_) => Host::COLUMNS,
        HostCommand::Restore(_) => Notification::FIELDS,
        _ => Host::FIELDS,
    })?;
    let client = ctx.client()?;
    match command {
        HostCommand::Create(args) => {
            let segment_id = segment_id(&client, &args.segment).await?;
            let host = client
                .create_host(NewHost {
                    segment_id,
                    name: args.name,
                    host_type: args.host_type,
                    control_attributes: args.control_attributes,
                    reserved: args.reserved,
                    on_maintenance: args.on_maintenance,
                })
                .await?;
            ctx.print_one(&host)
        }
        HostCommand::List(args) => {
            let filter = HostFilter {
                segment_id: optional_segment_id(&client, args.segment.as_deref()).await?,
                host_type: args.host_type,
                reserved: args.reserved,
                on_maintenance: args.on_maintenance,
                name: args.name,
            };
            let listed = fetch_pages(&args.paging, |size, token| {
                client.list_hosts(&filter, size, token)
            })
            .await?;
            ctx.print_list("host", listed)
        }
        HostCommand::Show(host) => {
            let (id, segment) = resolve(&client, &host).await?;
            let host = client.get_host(&id, segment.as_deref()).await?;
            ctx.print_one(&host)
        }
        HostCommand::Update(args) => {
            let (id, segment) = resolve(&client, &args.host).await?;
            let host = client
                .update_host(&id, segment.as_deref(), args.changes.changes())
                .await?;
            ctx.print_one(&host)
        }
        HostCommand::Delete(host) => {
            let (id, segment) = resolve(&client, &host).await?;
            client.delete_host(&id, segment.as_deref()).await?;
            ctx.print_deleted("host", &id)
        }
        HostCommand::Restore(args) => {
            let (id, segment) = resolve(&client, &args.host).await?;
            let notification = client.restore_host(&id, segment.as_deref()).await?;
            if args.watch {
                return super::notification::follow(&notification.id, ctx).await;
            }
            ctx.print_one(&notification)
        }
    }
}
