//! Rendering records for the terminal or for scripts: `table` (lists as
//! tables with the columns an operator expects, one record as a two-column
//! field/value table), `json` and `yaml` (the whole record, stable field
//! names, lists as arrays), and the openstack CLI's `value` and `csv`.
//! `--column` picks and orders the columns (see `columns`). Every format
//! escapes unsafe text (control, bidirectional and zero-width characters):
//! tables, values and CSV as `\u{..}`, JSON and YAML with their own `\u`
//! escapes, so the value read back is the one stored and the terminal never
//! sees the character itself.

use chrono::{DateTime, SecondsFormat, Utc};
use clap::ValueEnum;
use comfy_table::{ContentArrangement, Table};
use serde::Serialize;

mod columns;
mod escape;
mod records;

pub use columns::select;

pub use escape::{json_escaped, yaml_escaped};

/// How results are printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "lowercase")]
pub enum Format {
    /// Readable tables.
    #[default]
    Table,
    /// JSON (lists are arrays).
    Json,
    /// YAML.
    Yaml,
    /// Values separated by spaces, one row (or, for one record, one field)
    /// per line, no header: the openstack CLI's `-f value`, for scripts.
    Value,
    /// A header row, then one row per record, every field quoted: the
    /// openstack CLI's `-f csv`.
    Csv,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot encode the result as JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("cannot encode the result as YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    #[error("cannot encode the result as CSV: {0}")]
    Csv(#[from] csv::Error),
    #[error("--column {column:?}: no such column here; the columns are {}", available.join(", "))]
    UnknownColumn {
        column: String,
        available: Vec<&'static str>,
    },
}

/// A record with a table form.
pub trait Tabular {
    /// The columns of a list.
    const COLUMNS: &'static [&'static str];
    /// The fields of `show`.
    const FIELDS: &'static [&'static str];
    /// One list row, in `COLUMNS` order.
    fn row(&self) -> Vec<String>;
    /// Every field's value, in `FIELDS` order.
    fn values(&self) -> Vec<String>;
    /// Tables printed under the fields (for example progress events).
    fn detail_tables(&self) -> Vec<(String, Table)> {
        Vec::new()
    }
}

/// OpenStack client's look: ASCII boxes, a line under the header, none
/// between rows.
const OPENSTACK_STYLE: &str = "||--+-++|    ++++++";

/// A table in the house look, wrapped to the terminal's width when there is
/// one.
pub fn new_table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_preset(OPENSTACK_STYLE)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.iter().copied());
    // A terminal that reports no usable width (a bare pty, a serial
    // console) would squeeze every column to one character: do not wrap.
    if table.width().is_some_and(|width| width < MIN_WRAP_WIDTH) {
        table.set_content_arrangement(ContentArrangement::Disabled);
    }
    table
}

/// Narrower terminals get unwrapped tables.
const MIN_WRAP_WIDTH: u16 = 40;

/// A timestamp as RFC 3339 to the second, `-` when absent.
pub fn when(at: Option<DateTime<Utc>>) -> String {
    at.map(|at| at.to_rfc3339_opts(SecondsFormat::Secs, true))
        .unwrap_or_else(|| "-".to_owned())
}

/// An enum value or `-` for one this CLI does not know.
pub fn name_of<T: ToString>(value: Option<T>) -> String {
    value
        .map(|v| v.to_string())
        .unwrap_or_else(|| "-".to_owned())
}

/// `value` safe to put on a terminal: every control character (ESC, BEL,
/// DEL, C1...) but the newline, and every bidirectional or zero-width
/// character, as a `\u{..}` escape. What the server holds is printed
/// through this, so that a row stored before the API refused such
/// characters cannot drive or deceive the operator's terminal. JSON and
/// YAML output escape for themselves.
pub fn shown(value: &str) -> String {
    if !value.chars().any(|c| c != '\n' && is_unsafe_to_show(c)) {
        return value.to_owned();
    }
    let mut out = String::with_capacity(value.len() + 8);
    for c in value.chars() {
        if c != '\n' && is_unsafe_to_show(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// A character a terminal may act on, or that hides or reorders text: a
/// control character (C0 with ESC and BEL, DEL, C1) or a bidirectional or
/// zero-width one. The API's definition of unsafe text
/// (`instanceha_api::domain::is_unsafe_to_show`), which the CLI cannot
/// depend on without the API's database drivers; a test holds the two
/// equal over every character.
fn is_unsafe_to_show(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{202A}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}'
                | '\u{200E}'
                | '\u{200F}'
                | '\u{061C}'
                | '\u{200B}'..='\u{200D}'
                | '\u{2060}'
                | '\u{FEFF}'
        )
}

/// Cells escaped with [`shown`].
pub fn shown_row(cells: Vec<String>) -> Vec<String> {
    cells.iter().map(|cell| shown(cell)).collect()
}

/// Empty text as `-`, so that columns never look misaligned.
pub fn text(value: &str) -> String {
    if value.is_empty() {
        "-".to_owned()
    } else {
        value.to_owned()
    }
}

impl Format {
    /// The machine-readable encoding, `None` for tables, values and CSV.
    pub fn encoding(self) -> Option<Encoding> {
        match self {
            Self::Table | Self::Value | Self::Csv => None,
            Self::Json => Some(Encoding::Json),
            Self::Yaml => Some(Encoding::Yaml),
        }
    }
}

/// A machine-readable output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Json,
    Yaml,
}

/// `value` as pretty JSON or as a YAML document, ending in a newline, with
/// unsafe text escaped.
pub fn encode<T: Serialize + ?Sized>(encoding: Encoding, value: &T) -> Result<String, Error> {
    Ok(match encoding {
        Encoding::Json => escape::json_escaped(&serde_json::to_string_pretty(value)?) + "\n",
        Encoding::Yaml => escape::yaml_escaped(value)?,
    })
}

/// A list in `format`: the whole records as JSON or YAML, else the list's
/// columns; `columns` (from `--column`, empty for all) picks and orders
/// them, in every format.
pub fn render_list<T: Tabular + Serialize>(
    format: Format,
    columns: &[String],
    items: &[T],
) -> Result<String, Error> {
    if let (Some(encoding), true) = (format.encoding(), columns.is_empty()) {
        return encode(encoding, items);
    }
    let picked = select(T::COLUMNS, columns)?;
    let header: Vec<&str> = picked.iter().map(|&i| T::COLUMNS[i]).collect();
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|item| columns::pick(item.row(), &picked))
        .collect();
    match format {
        Format::Table => {
            let mut table = new_table(&header);
            for row in rows {
                table.add_row(shown_row(row));
            }
            Ok(format!("{table}\n"))
        }
        Format::Value => Ok(columns::value_lines(&rows)),
        Format::Csv => columns::csv(&header, &rows),
        Format::Json | Format::Yaml => columns::encode_selected(format, &header, &rows),
    }
}

/// One record in `format`: as JSON or YAML the whole record, else its
/// fields; `columns` (from `--column`, empty for all) picks and orders
/// them, in every format. Tables under the fields (progress events) are
/// shown only when every field is.
pub fn render_one<T: Tabular + Serialize>(
    format: Format,
    columns: &[String],
    item: &T,
) -> Result<String, Error> {
    if let (Some(encoding), true) = (format.encoding(), columns.is_empty()) {
        return encode(encoding, item);
    }
    let picked = select(T::FIELDS, columns)?;
    let header: Vec<&str> = picked.iter().map(|&i| T::FIELDS[i]).collect();
    let values = columns::pick(item.values(), &picked);
    match format {
        Format::Table => {
            let mut table = new_table(&["Field", "Value"]);
            for (field, value) in header.iter().zip(&values) {
                table.add_row(vec![(*field).to_owned(), shown(value)]);
            }
            let mut out = format!("{table}\n");
            if columns.is_empty() {
                for (title, detail) in item.detail_tables() {
                    out.push_str(&format!("\n{title}\n{detail}\n"));
                }
            }
            Ok(out)
        }
        Format::Value => Ok(values.iter().map(|v| shown(v) + "\n").collect()),
        Format::Csv => columns::csv(&header, &[values]),
        Format::Json | Format::Yaml => columns::encode_one_selected(format, &header, &values),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{RecoveryMethod, Segment};

    fn render_list_all<T: Tabular + Serialize>(
        format: Format,
        items: &[T],
    ) -> Result<String, Error> {
        render_list(format, &[], items)
    }

    fn render_one_all<T: Tabular + Serialize>(format: Format, item: &T) -> Result<String, Error> {
        render_one(format, &[], item)
    }

    #[test]
    fn unsafe_text_is_what_the_api_refuses() {
        for c in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
            assert_eq!(
                is_unsafe_to_show(c),
                instanceha_api::domain::is_unsafe_to_show(c),
                "U+{:04X}",
                u32::from(c)
            );
        }
    }

    fn segment() -> Segment {
        Segment {
            id: "0b8f3c4e-0000-4000-8000-000000000001".into(),
            name: "rack-1".into(),
            description: String::new(),
            service_type: "COMPUTE".into(),
            recovery_method: Some(RecoveryMethod::ReservedHost),
            enabled: true,
            return_to_service: None,
            created_at: DateTime::from_timestamp(1_700_000_000, 500),
            updated_at: None,
        }
    }

    #[test]
    fn a_table_list_has_the_columns_and_values() {
        let out = render_list_all(Format::Table, &[segment()]).unwrap();
        for needle in [
            "recovery_method",
            "rack-1",
            "reserved_host",
            "COMPUTE",
            "true",
        ] {
            assert!(out.contains(needle), "{needle} missing in\n{out}");
        }
    }

    #[test]
    fn show_is_a_field_value_table() {
        let out = render_one_all(Format::Table, &segment()).unwrap();
        assert!(out.contains("Field"), "{out}");
        assert!(out.contains("created_at"), "{out}");
        assert!(out.contains("2023-11-14T22:13:20Z"), "{out}");
        assert!(out.contains("updated_at"), "{out}");
    }

    #[test]
    fn json_and_yaml_carry_the_whole_record() {
        let json: serde_json::Value =
            serde_json::from_str(&render_one_all(Format::Json, &segment()).unwrap()).unwrap();
        assert_eq!(json["recovery_method"], "reserved_host");
        assert_eq!(json["created_at"], "2023-11-14T22:13:20.000000500Z");
        assert_eq!(json["updated_at"], serde_json::Value::Null);
        let list: serde_json::Value =
            serde_json::from_str(&render_list_all(Format::Json, &[segment()]).unwrap()).unwrap();
        assert_eq!(list.as_array().map(Vec::len), Some(1));

        let yaml: serde_json::Value = serde_yaml_ng::from_str(
            &render_list_all(Format::Yaml, &[segment(), segment()]).unwrap(),
        )
        .unwrap();
        assert_eq!(yaml[1]["name"], "rack-1");
    }

    #[test]
    fn every_field_has_a_value() {
        assert_eq!(Segment::FIELDS.len(), segment().values().len());
        assert_eq!(Segment::COLUMNS.len(), segment().row().len());
    }

    #[test]
    fn missing_values_show_as_a_dash() {
        assert_eq!(when(None), "-");
        assert_eq!(text(""), "-");
        assert_eq!(name_of::<RecoveryMethod>(None), "-");
    }

    #[test]
    fn what_the_server_holds_is_printed_escaped() {
        assert_eq!(shown("plain ☃\nnext"), "plain ☃\nnext");
        assert_eq!(shown("a\u{1b}[2Jb\u{7}"), "a\\u{1b}[2Jb\\u{7}");
        assert_eq!(shown("\u{9b}\u{7f}\r\t"), "\\u{9b}\\u{7f}\\u{d}\\u{9}");
        assert_eq!(shown("rack\u{202e}1\u{200b}"), "rack\\u{202e}1\\u{200b}");
        let mut evil = segment();
        evil.name = "rack\u{1b}]0;owned\u{7}".into();
        evil.description = "\u{1b}[31mred".into();
        for out in [
            render_list_all(Format::Table, std::slice::from_ref(&evil)).unwrap(),
            render_one_all(Format::Table, &evil).unwrap(),
        ] {
            assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");
            assert!(out.contains("\\u{1b}]0;owned\\u{7}"), "{out}");
        }
        // JSON stays JSON: serde escapes control characters itself.
        let json = render_one_all(Format::Json, &evil).unwrap();
        assert!(!json.contains('\u{1b}'), "{json:?}");
        let back: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(back["name"], "rack\u{1b}]0;owned\u{7}");
    }
}
