//! The resources' table forms: the columns of each list and the fields of
//! each `show`, by the names `--column` selects.

use comfy_table::Table;

use super::{Tabular, name_of, new_table, shown_row, text, when};
use crate::resources::{Host, Notification, ProgressEvent, Segment, Vmove};

impl Tabular for Segment {
    const COLUMNS: &'static [&'static str] = &[
        "id",
        "name",
        "recovery_method",
        "service_type",
        "enabled",
        "description",
    ];

    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.name.clone(),
            name_of(self.recovery_method),
            self.service_type.clone(),
            self.enabled.to_string(),
            text(&self.description),
        ]
    }

    const FIELDS: &'static [&'static str] = &[
        "id",
        "name",
        "description",
        "service_type",
        "recovery_method",
        "enabled",
        "return_to_service",
        "created_at",
        "updated_at",
    ];

    fn values(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.name.clone(),
            text(&self.description),
            self.service_type.clone(),
            name_of(self.recovery_method),
            self.enabled.to_string(),
            name_of(self.return_to_service),
            when(self.created_at),
            when(self.updated_at),
        ]
    }
}

impl Tabular for Host {
    const COLUMNS: &'static [&'static str] = &[
        "id",
        "name",
        "segment_id",
        "type",
        "control_attributes",
        "reserved",
        "on_maintenance",
    ];

    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.name.clone(),
            self.segment_id.clone(),
            self.host_type.clone(),
            text(&self.control_attributes),
            self.reserved.to_string(),
            self.on_maintenance.to_string(),
        ]
    }

    const FIELDS: &'static [&'static str] = &[
        "id",
        "name",
        "segment_id",
        "type",
        "control_attributes",
        "reserved",
        "on_maintenance",
        "created_at",
        "updated_at",
    ];

    /// The table's columns, then the times.
    fn values(&self) -> Vec<String> {
        let mut values = self.row();
        values.extend([when(self.created_at), when(self.updated_at)]);
        values
    }
}

impl Tabular for Notification {
    const COLUMNS: &'static [&'static str] = &[
        "id",
        "type",
        "hostname",
        "status",
        "generated_time",
        "message",
    ];

    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            name_of(self.notification_type),
            self.hostname.clone(),
            name_of(self.status),
            when(self.generated_time),
            text(&self.message),
        ]
    }

    const FIELDS: &'static [&'static str] = &[
        "id",
        "type",
        "hostname",
        "status",
        "message",
        "generated_time",
        "payload",
        "source_host_id",
        "segment_id",
        "attempts",
        "created_at",
        "updated_at",
    ];

    fn values(&self) -> Vec<String> {
        let payload = self
            .payload
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("\n");
        vec![
            self.id.clone(),
            name_of(self.notification_type),
            self.hostname.clone(),
            name_of(self.status),
            text(&self.message),
            when(self.generated_time),
            text(&payload),
            text(&self.source_host_id),
            text(&self.segment_id),
            self.attempts.to_string(),
            when(self.created_at),
            when(self.updated_at),
        ]
    }

    fn detail_tables(&self) -> Vec<(String, Table)> {
        let title = format!("progress events ({})", self.progress_events.len());
        let mut table = new_table(ProgressEvent::COLUMNS);
        for event in &self.progress_events {
            table.add_row(shown_row(event.row()));
        }
        vec![(title, table)]
    }
}

impl Tabular for ProgressEvent {
    const COLUMNS: &'static [&'static str] =
        &["sequence", "time", "task", "state", "instance", "message"];

    fn row(&self) -> Vec<String> {
        vec![
            self.sequence.to_string(),
            when(self.time),
            self.task.clone(),
            self.state.clone(),
            text(&self.instance_id),
            text(&self.message),
        ]
    }

    const FIELDS: &'static [&'static str] = Self::COLUMNS;

    fn values(&self) -> Vec<String> {
        self.row()
    }
}

impl Tabular for Vmove {
    const COLUMNS: &'static [&'static str] = &[
        "id",
        "instance",
        "name",
        "source",
        "destination",
        "status",
        "start",
        "end",
        "attempts",
        "message",
    ];

    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.instance_id.clone(),
            text(&self.instance_name),
            self.source_host.clone(),
            text(&self.dest_host),
            name_of(self.status),
            when(self.start_time),
            when(self.end_time),
            self.attempts.to_string(),
            text(&self.message),
        ]
    }

    const FIELDS: &'static [&'static str] = &[
        "id",
        "notification_id",
        "instance_id",
        "instance_name",
        "source_host",
        "dest_host",
        "type",
        "status",
        "step",
        "start_time",
        "end_time",
        "attempts",
        "message",
        "created_at",
        "updated_at",
    ];

    fn values(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.notification_id.clone(),
            self.instance_id.clone(),
            text(&self.instance_name),
            self.source_host.clone(),
            text(&self.dest_host),
            name_of(self.vmove_type),
            name_of(self.status),
            text(&self.step),
            when(self.start_time),
            when(self.end_time),
            self.attempts.to_string(),
            text(&self.message),
            when(self.created_at),
            when(self.updated_at),
        ]
    }
}
