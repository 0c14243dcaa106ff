//! Field validation shared by the domain types: every error names the field.

use std::fmt;

/// A request field that is missing or malformed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct InvalidField {
    /// The field's name as the client sent it (`payload.event`, `page_size`).
    pub field: String,
    pub reason: String,
}

impl InvalidField {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for InvalidField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

/// `value` quoted for an error message, cut to its first 64 characters:
/// a refusal must stay small whatever it refuses (gRPC carries it in a
/// header, which HTTP/2 peers cap at 8 to 16 KiB).
pub fn quoted(value: &str) -> String {
    const SHOWN: usize = 64;
    let count = value.chars().count();
    if count <= SHOWN {
        format!("{value:?}")
    } else {
        let head: String = value.chars().take(SHOWN).collect();
        format!("{head:?}... ({count} characters)")
    }
}

/// A name: 1 to 255 characters, not only blanks, no control characters.
pub fn name(field: &str, value: &str) -> Result<String, InvalidField> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(InvalidField::new(field, "must not be empty"));
    }
    bounded_text(field, value, 255)?;
    Ok(value.to_owned())
}

/// Free text of at most `max` characters without control characters
/// (newlines and tabs allowed).
pub fn bounded_text(field: &str, value: &str, max: usize) -> Result<String, InvalidField> {
    let chars = value.chars().count();
    if chars > max {
        return Err(InvalidField::new(
            field,
            format!("must be at most {max} characters (got {chars})"),
        ));
    }
    if value
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\t' | '\r'))
    {
        return Err(InvalidField::new(
            field,
            "must not contain control characters",
        ));
    }
    Ok(value.to_owned())
}

/// A text filter of a list: what a stored value can be (at most 255
/// characters, no control characters), or an error naming `field`; the
/// databases refuse some of those characters (PostgreSQL: NUL) in a query.
pub fn filter_text(field: &str, value: Option<&str>) -> Result<(), InvalidField> {
    match value {
        Some(value) => bounded_text(field, value, 255).map(drop),
        None => Ok(()),
    }
}

/// A compute host name as Nova knows it: 1 to 255 characters of
/// `[a-zA-Z0-9-._]` (Masakari's rule for notification hostnames).
pub fn hostname(field: &str, value: &str) -> Result<String, InvalidField> {
    if value.is_empty() {
        return Err(InvalidField::new(field, "must not be empty"));
    }
    if value.len() > 255 {
        return Err(InvalidField::new(
            field,
            format!(
                "must be at most 255 characters (got {})",
                value.chars().count()
            ),
        ));
    }
    if let Some(bad) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')))
    {
        return Err(InvalidField::new(
            field,
            format!("may only contain letters, digits, '-', '.' and '_' (found {bad:?})"),
        ));
    }
    Ok(value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_bounded_and_not_blank() {
        assert!(name("name", "seg-1").is_ok());
        assert_eq!(name("name", "").unwrap_err().field, "name");
        assert!(name("name", "   ").is_err());
        assert!(name("name", &"x".repeat(255)).is_ok());
        let err = name("name", &"x".repeat(256)).unwrap_err();
        assert!(err.reason.contains("255"), "{err}");
        assert!(name("name", "a\u{0}b").is_err());
    }

    #[test]
    fn hostnames_follow_masakari() {
        assert!(hostname("hostname", "compute-01.example_org").is_ok());
        assert!(hostname("hostname", "compute 01").is_err());
        assert!(hostname("hostname", "").is_err());
        assert!(hostname("hostname", &"h".repeat(256)).is_err());
    }
}
