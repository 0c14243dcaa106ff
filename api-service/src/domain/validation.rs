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

/// A character that changes how the text around it is shown without being
/// seen itself: a bidirectional embedding, override, isolate or mark
/// (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C) or a zero-width
/// character (U+200B–U+200D, U+2060, U+FEFF). In a name they let two
/// different names look the same, or reorder what an operator reads.
pub fn is_invisible_format(c: char) -> bool {
    matches!(
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

/// A character a terminal may act on, or that hides or reorders text: a
/// control character (C0 with ESC and BEL, DEL, C1 U+0080–U+009F) or an
/// invisible format character ([`is_invisible_format`]). The CLI escapes
/// these when it prints what the server holds.
pub fn is_unsafe_to_show(c: char) -> bool {
    c.is_control() || is_invisible_format(c)
}

/// Which characters a text field refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextRule {
    /// Names, payload keys and values, tokens: no control character and no
    /// invisible format character.
    Strict,
    /// Free text (descriptions, control attributes): newlines and tabs
    /// allowed, no other control character.
    Layout,
}

/// Refuses `value`, naming `field`, when it holds a character `rule`
/// forbids: the one check of every text a client sends.
pub fn safe_text(field: &str, value: &str, rule: TextRule) -> Result<(), InvalidField> {
    let refused = value.chars().enumerate().find(|&(_, c)| match rule {
        TextRule::Strict => is_unsafe_to_show(c),
        TextRule::Layout => c.is_control() && !matches!(c, '\n' | '\t' | '\r'),
    });
    match refused {
        None => Ok(()),
        Some((at, c)) => {
            let kind = if c.is_control() {
                "control characters"
            } else {
                "bidirectional or zero-width characters"
            };
            Err(InvalidField::new(
                field,
                format!(
                    "must not contain {kind} (found U+{:04X} at character {at})",
                    u32::from(c)
                ),
            ))
        }
    }
}

/// A name: 1 to 255 characters, not only blanks, no control, bidirectional
/// or zero-width characters.
pub fn name(field: &str, value: &str) -> Result<String, InvalidField> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(InvalidField::new(field, "must not be empty"));
    }
    at_most(field, value, 255)?;
    safe_text(field, value, TextRule::Strict)?;
    Ok(value.to_owned())
}

/// Free text of at most `max` characters without control characters
/// (newlines and tabs allowed).
pub fn bounded_text(field: &str, value: &str, max: usize) -> Result<String, InvalidField> {
    at_most(field, value, max)?;
    safe_text(field, value, TextRule::Layout)?;
    Ok(value.to_owned())
}

fn at_most(field: &str, value: &str, max: usize) -> Result<(), InvalidField> {
    let chars = value.chars().count();
    if chars > max {
        return Err(InvalidField::new(
            field,
            format!("must be at most {max} characters (got {chars})"),
        ));
    }
    Ok(())
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
    fn names_refuse_control_bidi_and_zero_width_characters() {
        for bad in [
            "a\u{1b}[31mb",
            "bell\u{7}",
            "del\u{7f}",
            "c1\u{9b}",
            "line\nbreak",
            "rack\u{202E}1",
            "rack\u{2066}1",
            "mark\u{200F}",
            "arabic\u{61C}",
            "zero\u{200B}width",
            "join\u{200D}",
            "word\u{2060}joiner",
            "\u{FEFF}bom",
        ] {
            let err = name("name", bad).unwrap_err();
            assert_eq!(err.field, "name", "{bad:?}");
            assert!(err.reason.contains("U+"), "{err}");
        }
        assert!(name("name", "Zürich rack ☃ 東京").is_ok());
        // Free text keeps its layout but not the rest.
        assert!(bounded_text("description", "two\nlines\tand a tab", 255).is_ok());
        assert!(bounded_text("description", "\u{1b}]0;pwned\u{7}", 255).is_err());
    }

    #[test]
    fn hostnames_follow_masakari() {
        assert!(hostname("hostname", "compute-01.example_org").is_ok());
        assert!(hostname("hostname", "compute 01").is_err());
        assert!(hostname("hostname", "").is_err());
        assert!(hostname("hostname", &"h".repeat(256)).is_err());
    }
}
