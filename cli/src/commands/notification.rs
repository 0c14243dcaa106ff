//! `instanceha notification ...`: failure reports and their recovery
//! (Masakari's `openstack notification create|list|show`, plus `watch` to
//! follow a recovery live).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};

use super::{Context, Paging, fetch_pages, host_id, optional_segment_id};
use crate::error::{Error, Exit};
use crate::output::Tabular as _;
use crate::resources::{
    NewNotification, Notification, NotificationFilter, NotificationStatus, NotificationType,
};
use crate::watch::{self, state::Outcome};

#[derive(Subcommand, Debug)]
pub enum NotificationCommand {
    /// Report a failure, as a monitoring agent does; recovery starts at once
    Create(CreateArgs),
    /// List notifications, newest first
    List(ListArgs),
    /// Show one notification with its progress events
    Show {
        /// The notification's ID
        id: String,
    },
    /// Follow a notification's recovery live until it is finished, failed or
    /// ignored (exit 0 when finished or ignored, 10 when failed)
    Watch {
        /// The notification's ID
        id: String,
        /// Retry it first (it must be failed), then follow the new run
        #[arg(long)]
        retry: bool,
    },
    /// Recover a failed notification again: its instances not recovered go
    /// back to pending and a new run starts at once (admin)
    Retry {
        /// The notification's ID
        id: String,
        /// Follow the new run live, as `watch` does
        #[arg(long)]
        watch: bool,
    },
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    /// What failed
    #[arg(long = "type", value_enum, value_name = "TYPE", ignore_case = true)]
    pub notification_type: NotificationType,
    /// The nova-compute host name of a registered host
    #[arg(long)]
    pub hostname: String,
    /// When the failure was seen (RFC 3339; default: now)
    #[arg(long, value_parser = parse_time, value_name = "RFC3339")]
    pub generated_time: Option<DateTime<Utc>>,
    /// The payload as KEY=VALUE (repeatable, or several after one --payload),
    /// or a JSON object as Masakari's client takes it. COMPUTE_HOST:
    /// event=STOPPED|STARTED [host_status=NORMAL|UNKNOWN]
    /// [cluster_status=ONLINE|OFFLINE]; PROCESS: process_name=NAME
    /// event=STOPPED|STARTED; VM: instance_uuid=UUID vir_domain_event=EVENT
    /// event=EVENT
    #[arg(
        long,
        required = true,
        num_args = 1..,
        value_parser = parse_payload,
        value_name = "KEY=VALUE"
    )]
    pub payload: Vec<PayloadItems>,
    /// A retried create with the same key returns the first notification
    #[arg(long)]
    pub idempotency_key: Option<String>,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Only notifications in this status
    #[arg(long, value_enum)]
    pub status: Option<NotificationStatus>,
    /// Only notifications of this type
    #[arg(long = "type", value_enum, value_name = "TYPE", ignore_case = true)]
    pub notification_type: Option<NotificationType>,
    /// Only notifications for this host name
    #[arg(long)]
    pub hostname: Option<String>,
    /// Only notifications for this host (ID or name)
    #[arg(long)]
    pub host: Option<String>,
    /// Only notifications of this segment (ID or name)
    #[arg(long)]
    pub segment: Option<String>,
    /// Only notifications generated at or after this time (RFC 3339)
    #[arg(long, value_parser = parse_time, value_name = "RFC3339")]
    pub since: Option<DateTime<Utc>>,
    #[command(flatten)]
    pub paging: Paging,
}

/// Payload entries from one `--payload` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayloadItems(Vec<(String, String)>);

/// `KEY=VALUE`, or a JSON object whose values are strings, numbers or
/// booleans.
pub fn parse_payload(text: &str) -> Result<PayloadItems, String> {
    let trimmed = text.trim();
    if trimmed.starts_with('{') {
        let object: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(trimmed).map_err(|e| format!("not a JSON object: {e}"))?;
        let items = object
            .into_iter()
            .map(|(key, value)| match value {
                serde_json::Value::String(s) => Ok((key, s)),
                serde_json::Value::Number(n) => Ok((key, n.to_string())),
                serde_json::Value::Bool(b) => Ok((key, b.to_string())),
                other => Err(format!("{key}: {other} is not a string")),
            })
            .collect::<Result<_, _>>()?;
        return Ok(PayloadItems(items));
    }
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => Ok(PayloadItems(vec![(
            key.trim().to_owned(),
            value.to_owned(),
        )])),
        _ => Err(format!(
            "{text:?} is not KEY=VALUE (for example event=STOPPED)"
        )),
    }
}

/// An RFC 3339 time such as 2025-06-01T12:00:00Z.
pub fn parse_time(text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text.trim())
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("{text:?} is not an RFC 3339 time such as 2025-06-01T12:00:00Z ({e})"))
}

/// The payload map; a key given twice is a usage error.
fn payload(items: Vec<PayloadItems>) -> Result<BTreeMap<String, String>, Error> {
    let mut payload = BTreeMap::new();
    for (key, value) in items.into_iter().flat_map(|items| items.0) {
        if payload.contains_key(&key) {
            return Err(Error::Usage(format!(
                "--payload: the key {key:?} is given twice"
            )));
        }
        payload.insert(key, value);
    }
    Ok(payload)
}

pub async fn run(command: NotificationCommand, ctx: &mut Context) -> Result<Exit, Error> {
    ctx.check_columns(match &command {
        NotificationCommand::List(_) => Notification::COLUMNS,
        _ => Notification::FIELDS,
    })?;
    match command {
        NotificationCommand::Create(args) => {
            let payload = payload(args.payload)?;
            let client = ctx.client()?;
            let notification = client
                .create_notification(NewNotification {
                    notification_type: args.notification_type,
                    hostname: args.hostname,
                    generated_time: args.generated_time.unwrap_or_else(Utc::now),
                    payload,
                    idempotency_key: args.idempotency_key,
                })
                .await?;
            ctx.print_one(&notification)
        }
        NotificationCommand::List(args) => {
            let client = ctx.client()?;
            let segment_id = optional_segment_id(&client, args.segment.as_deref()).await?;
            let source_host_id = match args.host.as_deref() {
                Some(host) => Some(host_id(&client, host, segment_id.as_deref()).await?),
                None => None,
            };
            let filter = NotificationFilter {
                status: args.status,
                notification_type: args.notification_type,
                hostname: args.hostname,
                source_host_id,
                segment_id,
                generated_since: args.since,
            };
            let listed = fetch_pages(&args.paging, |size, token| {
                client.list_notifications(&filter, size, token)
            })
            .await?;
            ctx.print_list("notification", listed)
        }
        NotificationCommand::Show { id } => {
            let client = ctx.client()?;
            let notification = client.get_notification(&id).await?;
            ctx.print_one(&notification)
        }
        NotificationCommand::Watch { id, retry } => {
            if retry {
                ctx.client()?.retry_notification(&id).await?;
            }
            follow(&id, ctx).await
        }
        NotificationCommand::Retry { id, watch } => {
            let notification = ctx.client()?.retry_notification(&id).await?;
            if watch {
                follow(&id, ctx).await
            } else {
                ctx.print_one(&notification)
            }
        }
    }
}

/// Follows a notification live to its end.
pub(super) async fn follow(id: &str, ctx: &mut Context) -> Result<Exit, Error> {
    let client = ctx.client()?;
    let format = ctx.format();
    let terminal = ctx.stdout_is_terminal;
    let outcome = watch::watch(&client, id, format, terminal, ctx.out.as_mut()).await?;
    Ok(match outcome {
        Outcome::Finished | Outcome::Ignored => Exit::Ok,
        Outcome::Failed => Exit::RecoveryFailed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_values_are_key_value_or_json() {
        assert_eq!(
            parse_payload("event=STOPPED").unwrap(),
            PayloadItems(vec![("event".into(), "STOPPED".into())])
        );
        assert_eq!(
            parse_payload("message=a=b").unwrap(),
            PayloadItems(vec![("message".into(), "a=b".into())])
        );
        assert_eq!(
            parse_payload(r#"{"event": "STOPPED", "retries": 3}"#).unwrap(),
            PayloadItems(vec![
                ("event".into(), "STOPPED".into()),
                ("retries".into(), "3".into())
            ])
        );
        assert!(parse_payload("STOPPED").is_err());
        assert!(parse_payload("=x").is_err());
        assert!(parse_payload(r#"{"a": [1]}"#).is_err());
    }

    #[test]
    fn a_payload_key_given_twice_is_refused() {
        let items = vec![
            parse_payload("event=STOPPED").unwrap(),
            parse_payload("event=STARTED").unwrap(),
        ];
        assert!(payload(items).is_err());
        let items = vec![
            parse_payload("event=STOPPED").unwrap(),
            parse_payload("host_status=NORMAL").unwrap(),
        ];
        assert_eq!(payload(items).unwrap().len(), 2);
    }

    #[test]
    fn times_are_rfc3339() {
        assert_eq!(
            parse_time("2025-06-01T14:00:00+02:00").unwrap(),
            parse_time("2025-06-01T12:00:00Z").unwrap()
        );
        assert!(parse_time("yesterday").unwrap_err().contains("RFC 3339"));
    }
}
