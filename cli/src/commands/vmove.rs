//! `instanceha vmove ...`: the per-instance records of a recovery
//! (Masakari's `openstack notification vmove list|show`).

use clap::{Args, Subcommand};

use super::{Context, Paging, fetch_pages};
use crate::error::{Error, Exit};
use crate::output::Tabular as _;
use crate::resources::{Vmove, VmoveFilter, VmoveStatus, VmoveType};

#[derive(Subcommand, Debug)]
pub enum VmoveCommand {
    /// List the instances of a notification's recovery
    List(ListArgs),
    /// Show one instance's recovery
    Show {
        /// The notification's ID
        notification_id: String,
        /// The vmove's ID
        vmove_id: String,
    },
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// The notification's ID
    pub notification_id: String,
    /// Only vmoves in this status
    #[arg(long, value_enum)]
    pub status: Option<VmoveStatus>,
    /// Only vmoves of this type
    #[arg(long = "type", value_enum, value_name = "TYPE")]
    pub vmove_type: Option<VmoveType>,
    #[command(flatten)]
    pub paging: Paging,
}

pub async fn run(command: VmoveCommand, ctx: &mut Context) -> Result<Exit, Error> {
    ctx.check_columns(match &command {
        VmoveCommand::List(_) => Vmove::COLUMNS,
        VmoveCommand::Show { .. } => Vmove::FIELDS,
    })?;
    let client = ctx.client()?;
    match command {
        VmoveCommand::List(args) => {
            let filter = VmoveFilter {
                status: args.status,
                vmove_type: args.vmove_type,
            };
            let listed = fetch_pages(&args.paging, |size, token| {
                client.list_vmoves(&args.notification_id, &filter, size, token)
            })
            .await?;
            ctx.print_list("vmove", listed)
        }
        VmoveCommand::Show {
            notification_id,
            vmove_id,
        } => {
            let vmove = client.get_vmove(&notification_id, &vmove_id).await?;
            ctx.print_one(&vmove)
        }
    }
}
