//! Unsafe text (control, bidirectional and zero-width characters) escaped
//! in the machine-readable formats: JSON with `\\uXXXX`, YAML with
//! double-quoted scalars, so that what is read back is what was stored and
//! the terminal never sees the character itself.

use serde::Serialize;

use super::is_unsafe_to_show;

use super::Error;

/// Whether `c` must not reach a terminal raw (a newline may).
fn unsafe_char(c: char) -> bool {
    c != '\n' && is_unsafe_to_show(c)
}

/// JSON with every unsafe character as a `\uXXXX` escape (a surrogate
/// pair beyond the BMP). serde escapes C0 controls itself; DEL, C1 and the
/// bidirectional and zero-width characters it leaves raw. Outside strings
/// JSON has only ASCII punctuation, spaces and newlines, so every unsafe
/// character is in a string, where the escape means the same character.
pub fn json_escaped(json: &str) -> String {
    if !json.chars().any(unsafe_char) {
        return json.to_owned();
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if unsafe_char(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// YAML with every string holding unsafe text written double-quoted with
/// escapes (`\u202e`): the emitter would write bidirectional and zero-width
/// characters raw. Such strings (values or keys) are swapped for
/// placeholders, the document emitted, and the placeholders replaced by
/// the escaped scalars.
pub fn yaml_escaped<T: Serialize + ?Sized>(value: &T) -> Result<String, Error> {
    let plain = serde_yaml_ng::to_string(value)?;
    if !plain.chars().any(unsafe_char) {
        return Ok(plain);
    }
    let mut value = serde_yaml_ng::to_value(value)?;
    let mut swapped = Vec::new();
    swap_unsafe(&mut value, &mut swapped);
    let mut out = serde_yaml_ng::to_string(&value)?;
    // The highest number first: `__ihaesc_1__` is no prefix of another,
    // but replace from the end anyway.
    for (i, original) in swapped.iter().enumerate().rev() {
        out = out.replace(&placeholder(i), &yaml_double_quoted(original));
    }
    Ok(out)
}

fn placeholder(i: usize) -> String {
    format!("__ihaesc_{i}__")
}

/// Replaces each string with unsafe text in `value` (keys too) by a
/// placeholder, keeping the original in `swapped`.
fn swap_unsafe(value: &mut serde_yaml_ng::Value, swapped: &mut Vec<String>) {
    use serde_yaml_ng::Value;
    let swap = |text: &mut String, swapped: &mut Vec<String>| {
        if text.chars().any(unsafe_char) {
            let original = std::mem::replace(text, placeholder(swapped.len()));
            swapped.push(original);
        }
    };
    match value {
        Value::String(text) => swap(text, swapped),
        Value::Sequence(items) => items.iter_mut().for_each(|v| swap_unsafe(v, swapped)),
        Value::Mapping(map) => {
            let entries: Vec<_> = std::mem::take(map).into_iter().collect();
            for (mut key, mut item) in entries {
                if let Value::String(text) = &mut key {
                    swap(text, swapped);
                }
                swap_unsafe(&mut item, swapped);
                map.insert(key, item);
            }
        }
        Value::Tagged(tagged) => swap_unsafe(&mut tagged.value, swapped),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// `text` as a YAML double-quoted scalar: quotes, backslashes, newlines,
/// tabs and unsafe characters escaped.
fn yaml_double_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if is_unsafe_to_show(c) && u32::from(c) <= 0xFFFF => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c if is_unsafe_to_show(c) => out.push_str(&format!("\\U{:08x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::super::{Encoding, Format, encode, render_list, render_one};
    use super::*;
    use crate::resources::{RecoveryMethod, Segment};

    fn segment() -> Segment {
        Segment {
            id: "0b8f3c4e-0000-4000-8000-000000000001".into(),
            name: "rack-1".into(),
            description: String::new(),
            service_type: "COMPUTE".into(),
            recovery_method: Some(RecoveryMethod::ReservedHost),
            enabled: true,
            return_to_service: None,
            created_at: None,
            updated_at: None,
        }
    }

    #[test]
    fn json_and_yaml_escape_unsafe_text_and_read_back_the_same() {
        let mut evil = segment();
        evil.name = "rack\u{202e}1gnp.exe\u{200b}".into();
        evil.description = "a\u{7f}b\u{85}c\u{1b}[2J\"quoted\" \\ \u{2066}x\nline".into();
        for format in [Format::Json, Format::Yaml] {
            for out in [
                render_one(format, &[], &evil).unwrap(),
                render_list(format, &[], std::slice::from_ref(&evil)).unwrap(),
            ] {
                assert!(
                    !out.chars().any(|c| c != '\n' && is_unsafe_to_show(c)),
                    "{format:?}: {out:?}"
                );
                let back: serde_json::Value = match format {
                    Format::Json => serde_json::from_str(&out).unwrap(),
                    _ => serde_yaml_ng::from_str(&out).unwrap(),
                };
                let back = if back.is_array() {
                    back[0].clone()
                } else {
                    back
                };
                assert_eq!(back["name"], evil.name.as_str(), "{format:?}: {out}");
                assert_eq!(
                    back["description"],
                    evil.description.as_str(),
                    "{format:?}: {out}"
                );
                assert_eq!(back["service_type"], "COMPUTE", "{format:?}");
            }
        }
        let yaml = render_one(Format::Yaml, &[], &evil).unwrap();
        assert!(yaml.contains("\\u202e"), "{yaml}");
        let json = render_one(Format::Json, &[], &evil).unwrap();
        assert!(
            json.contains("\\u202e") && json.contains("\\u007f"),
            "{json}"
        );
        // Unsafe text in a map key (a payload stored before the API
        // refused it) is escaped too.
        let map = std::collections::BTreeMap::from([("k\u{202e}y", "v")]);
        let yaml = encode(Encoding::Yaml, &map).unwrap();
        assert!(!yaml.contains('\u{202e}'), "{yaml}");
        let back: std::collections::BTreeMap<String, String> =
            serde_yaml_ng::from_str(&yaml).unwrap();
        assert_eq!(back["k\u{202e}y"], "v");
    }
}
