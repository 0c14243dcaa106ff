//! What `--column` picks, and the openstack CLI's plain-text formats:
//! `value` (cells separated by spaces, one row per line, no header) and
//! `csv` (a header row, then every field quoted), as its `cliff` library
//! prints them. With `--column`, JSON and YAML print the picked columns as
//! displayed, keyed by their names, in the order given.

use serde::Serialize;
use serde::ser::SerializeMap as _;

use super::{Error, Format, encode, shown};

/// The positions in `available` of the columns `wanted` names, in the
/// order given (names match ignoring ASCII case); every column when
/// `wanted` is empty. A name not in `available` is an error naming it and
/// listing the columns there are.
pub fn select(available: &'static [&'static str], wanted: &[String]) -> Result<Vec<usize>, Error> {
    if wanted.is_empty() {
        return Ok((0..available.len()).collect());
    }
    wanted
        .iter()
        .map(|name| {
            available
                .iter()
                .position(|column| column.eq_ignore_ascii_case(name.trim()))
                .ok_or_else(|| Error::UnknownColumn {
                    column: name.clone(),
                    available: available.to_vec(),
                })
        })
        .collect()
}

/// The cells of `row` at `picked`, in that order.
pub(super) fn pick(row: Vec<String>, picked: &[usize]) -> Vec<String> {
    picked.iter().map(|&i| row[i].clone()).collect()
}

/// `-f value`: each row's cells separated by one space, one row per line.
pub(super) fn value_lines(rows: &[Vec<String>]) -> String {
    rows.iter()
        .map(|row| {
            let cells: Vec<String> = row.iter().map(|cell| shown(cell)).collect();
            cells.join(" ") + "\n"
        })
        .collect()
}

/// `-f csv`: the header row, then the rows, every field in double quotes
/// (a quote inside doubled), lines ending in `\n`.
pub(super) fn csv(header: &[&str], rows: &[Vec<String>]) -> Result<String, Error> {
    let mut writer = csv::WriterBuilder::new()
        .quote_style(csv::QuoteStyle::Always)
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    writer.write_record(header)?;
    for row in rows {
        writer.write_record(row.iter().map(|cell| shown(cell)))?;
    }
    let bytes = writer
        .into_inner()
        .map_err(|e| Error::Csv(csv::Error::from(e.into_error())))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Picked columns as a map, in the order picked.
struct Selected<'a> {
    header: &'a [&'a str],
    values: &'a [String],
}

impl Serialize for Selected<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.header.len()))?;
        for (name, value) in self.header.iter().zip(self.values) {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

/// `-f json|yaml` with `--column`, for a list: an array of maps.
pub(super) fn encode_selected(
    format: Format,
    header: &[&str],
    rows: &[Vec<String>],
) -> Result<String, Error> {
    let selected: Vec<Selected<'_>> = rows
        .iter()
        .map(|values| Selected { header, values })
        .collect();
    encode(format.encoding().expect("json or yaml"), &selected)
}

/// `-f json|yaml` with `--column`, for one record: a map.
pub(super) fn encode_one_selected(
    format: Format,
    header: &[&str],
    values: &[String],
) -> Result<String, Error> {
    encode(
        format.encoding().expect("json or yaml"),
        &Selected { header, values },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const COLUMNS: &[&str] = &["id", "name", "enabled"];

    #[test]
    fn columns_are_picked_in_the_order_given() {
        assert_eq!(select(COLUMNS, &[]).unwrap(), [0, 1, 2]);
        let wanted = ["enabled".to_owned(), "ID".to_owned()];
        assert_eq!(select(COLUMNS, &wanted).unwrap(), [2, 0]);
    }

    #[test]
    fn an_unknown_column_is_named_with_the_columns_there_are() {
        let err = select(COLUMNS, &["name".to_owned(), "colour".to_owned()]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--column \"colour\": no such column here; the columns are id, name, enabled"
        );
    }

    #[test]
    fn values_are_space_separated_and_escaped() {
        let rows = vec![
            vec!["a".to_owned(), "b c".to_owned()],
            vec!["\u{1b}[2J".to_owned(), "d".to_owned()],
        ];
        assert_eq!(value_lines(&rows), "a b c\n\\u{1b}[2J d\n");
    }

    #[test]
    fn csv_quotes_every_field_and_doubles_quotes() {
        let rows = vec![vec!["say \"hi\"".to_owned(), "1, 2".to_owned()]];
        assert_eq!(
            csv(&["id", "name"], &rows).unwrap(),
            "\"id\",\"name\"\n\"say \"\"hi\"\"\",\"1, 2\"\n"
        );
    }
}
