//! The console's one way to write HTML: an [`Html`] buffer that takes
//! markup only as `&'static str` (written in this crate's source) and
//! every other value through [`Html::text`], which escapes it. A value
//! from a client or from Nova (a host name, a message, a payload) cannot
//! reach the page as markup.

use std::fmt::Write as _;

use chrono::{DateTime, SecondsFormat, Utc};

use crate::domain::is_unsafe_to_show;

/// HTML being written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Html(String);

impl Html {
    pub fn new() -> Self {
        Self::default()
    }

    /// Markup written in the source: tags, attribute names, fixed text.
    pub fn raw(&mut self, markup: &'static str) -> &mut Self {
        self.0.push_str(markup);
        self
    }

    /// Any value, escaped for element content and quoted attributes.
    pub fn text(&mut self, value: &str) -> &mut Self {
        escape_into(&mut self.0, value);
        self
    }

    /// A number (nothing to escape).
    pub fn num(&mut self, value: impl Number) -> &mut Self {
        let _ = write!(self.0, "{value}");
        self
    }

    /// Markup built by another [`Html`].
    pub fn html(&mut self, other: &Html) -> &mut Self {
        self.0.push_str(&other.0);
        self
    }

    /// `<time datetime="...">...</time>`, in UTC to the second.
    pub fn time(&mut self, at: DateTime<Utc>) -> &mut Self {
        let iso = at.to_rfc3339_opts(SecondsFormat::Secs, true);
        self.raw("<time datetime=\"")
            .text(&iso)
            .raw("\">")
            .text(&at.format("%Y-%m-%d %H:%M:%S").to_string())
            .raw("</time>")
    }

    /// `<time>` for an optional time, or a dash read as "none".
    pub fn maybe_time(&mut self, at: Option<DateTime<Utc>>) -> &mut Self {
        match at {
            Some(at) => self.time(at),
            None => self.raw("<span aria-label=\"none\">–</span>"),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn into_string(self) -> String {
        self.0
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An integer: its digits need no escaping.
pub trait Number: std::fmt::Display {}
impl Number for u32 {}
impl Number for u64 {}
impl Number for usize {}
impl Number for i32 {}
impl Number for i64 {}

/// Appends `value` to `out`, escaped: `& < > " '` become entities, and a
/// character that hides or reorders text (`domain::is_unsafe_to_show`:
/// controls, bidirectional and zero-width characters) is shown as its
/// code, `\u{202e}`, so that rows stored before the intake refused them
/// cannot disguise themselves either.
pub fn escape_into(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if is_unsafe_to_show(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
}

/// `value` escaped.
pub fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    escape_into(&mut out, value);
    out
}

/// `value` for a URL's query or path segment: percent-encoded but for
/// unreserved characters (then escaped as HTML where written).
pub fn url_component(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            _ => {
                let _ = write!(out, "%{byte:02X}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_and_markup_is_not() {
        let mut html = Html::new();
        html.raw("<td title=\"")
            .text("\"><script>alert('x')</script>")
            .raw("\">")
            .text("a & b")
            .raw("</td>");
        assert_eq!(
            html.as_str(),
            "<td title=\"&quot;&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;\">a &amp; b</td>"
        );
    }

    #[test]
    fn hidden_and_reordering_characters_are_shown_as_codes() {
        assert_eq!(escape("evil\u{202e}gpj.exe"), "evil\\u{202e}gpj.exe");
        assert_eq!(escape("a\u{1b}[31mb"), "a\\u{1b}[31mb");
        assert_eq!(escape("zero\u{200b}width"), "zero\\u{200b}width");
        assert_eq!(escape("compute-01 été"), "compute-01 été");
    }

    #[test]
    fn times_are_utc_with_a_machine_readable_value() {
        let at = DateTime::parse_from_rfc3339("2026-12-05T10:11:12.345Z")
            .unwrap()
            .with_timezone(&Utc);
        let mut html = Html::new();
        html.time(at);
        assert_eq!(
            html.as_str(),
            "<time datetime=\"2026-12-05T10:11:12Z\">2026-12-05 10:11:12</time>"
        );
    }

    #[test]
    fn url_components_are_percent_encoded() {
        assert_eq!(url_component("compute 01/&x"), "compute%2001%2F%26x");
        assert_eq!(url_component("a-b_c.d~e"), "a-b_c.d~e");
    }
}
