//! The code of a Rust source without its comments and the contents of its
//! string and character literals, so that the rules match code and not
//! prose: a doc comment may name `sea_orm`, a string may hold `pb::`.
//!
//! Blanked text becomes spaces and newlines stay, so byte offsets and line
//! numbers are those of the source.

/// `text` with comments and literal contents blanked out. A lexer good
/// enough for well-formed Rust: line and (nested) block comments, strings,
/// byte strings, raw strings with any number of `#`, character literals
/// told apart from lifetimes and labels.
pub fn blank_non_code(text: &str) -> String {
    let src = text.as_bytes();
    let mut out = src.to_vec();
    let mut i = 0;
    while i < src.len() {
        match src[i] {
            b'/' if src.get(i + 1) == Some(&b'/') => {
                let end = find_from(src, i, b"\n").unwrap_or(src.len());
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if src.get(i + 1) == Some(&b'*') => {
                let end = block_comment_end(src, i);
                blank(&mut out, i, end);
                i = end;
            }
            b'"' => {
                let end = string_end(src, i + 1);
                blank(&mut out, i + 1, end.saturating_sub(1));
                i = end;
            }
            b'r' | b'b' if starts_raw_string(src, i) => {
                let hashes_at = if src[i] == b'b' { i + 2 } else { i + 1 };
                let hashes = src[hashes_at..].iter().take_while(|&&b| b == b'#').count();
                let open = hashes_at + hashes; // the opening quote
                let mut close = vec![b'"'];
                close.extend(std::iter::repeat_n(b'#', hashes));
                let end = find_from(src, open + 1, &close).map_or(src.len(), |at| at + close.len());
                blank(&mut out, open + 1, end.saturating_sub(close.len()));
                i = end;
            }
            b'\'' => match char_literal_end(src, i) {
                Some(end) => {
                    blank(&mut out, i + 1, end - 1);
                    i = end;
                }
                None => i += 1, // a lifetime or a label
            },
            b if is_ident_byte(b) => {
                // Skip the whole identifier, so that the `r` or `b` inside
                // one (`for"`, `sub"`...) never starts a literal.
                while i < src.len() && is_ident_byte(src[i]) {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    // Only whole characters were blanked (every boundary above is ASCII), so
    // the result is still UTF-8.
    String::from_utf8(out).expect("blanking keeps UTF-8")
}

/// Whether `b` can be part of an identifier (ASCII; non-ASCII identifiers
/// are not used here).
pub fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn blank(out: &mut [u8], from: usize, to: usize) {
    let to = to.min(out.len());
    for b in &mut out[from.min(to)..to] {
        if *b != b'\n' {
            *b = b' ';
        }
    }
}

fn find_from(src: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    src.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|at| from + at)
}

/// The offset just past the block comment opening at `start`.
fn block_comment_end(src: &[u8], start: usize) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i + 1 < src.len() {
        match (src[i], src[i + 1]) {
            (b'/', b'*') => {
                depth += 1;
                i += 2;
            }
            (b'*', b'/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    src.len()
}

/// The offset just past the closing quote of a string whose contents start
/// at `from`.
fn string_end(src: &[u8], from: usize) -> usize {
    let mut i = from;
    while i < src.len() {
        match src[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    src.len()
}

/// `r"`, `r#"`, `br"`, `br#"`... at `i`, not inside an identifier.
fn starts_raw_string(src: &[u8], i: usize) -> bool {
    if i > 0 && is_ident_byte(src[i - 1]) {
        return false;
    }
    let after_r = match (src[i], src.get(i + 1)) {
        (b'r', _) => i + 1,
        (b'b', Some(b'r')) => i + 2,
        _ => return false,
    };
    let hashes = src[after_r..].iter().take_while(|&&b| b == b'#').count();
    src.get(after_r + hashes) == Some(&b'"')
}

/// The offset just past a character literal opening at `start`, or `None`
/// for a lifetime or label (`'a`, `'static`, `'outer:`).
fn char_literal_end(src: &[u8], start: usize) -> Option<usize> {
    let next = *src.get(start + 1)?;
    if next == b'\\' {
        // An escape: up to the closing quote (`'\n'`, `'\''`, `'\u{1F600}'`).
        let close = find_from(src, start + 3, b"'")?;
        return Some(close + 1);
    }
    // One character, then the closing quote.
    let width = match next {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
    };
    (src.get(start + 1 + width) == Some(&b'\'')).then_some(start + 2 + width)
}

#[cfg(test)]
mod tests {
    use super::blank_non_code;

    #[test]
    fn comments_and_literals_are_blanked_code_is_kept() {
        let src = "use a::b; // sea_orm\n/* pb:: /* nested */ still */ let s = \"pb::X\";\n";
        let code = blank_non_code(src);
        assert_eq!(code.len(), src.len());
        assert_eq!(code.lines().count(), src.lines().count());
        assert!(code.contains("use a::b;"));
        assert!(code.contains("let s = \""));
        assert!(!code.contains("sea_orm"));
        assert!(!code.contains("pb::"));
        assert!(!code.contains("still"));
    }

    #[test]
    fn raw_strings_chars_and_lifetimes() {
        let code = blank_non_code(
            "let r = r#\"a \"quoted\" pb::X\"#; let c = '\"'; fn f<'a>(x: &'a str) {} let q = '\\''; pb::Y",
        );
        assert!(!code.contains("pb::X"));
        assert!(code.contains("fn f<'a>(x: &'a str)"));
        assert!(code.ends_with("pb::Y"), "{code}");
    }

    #[test]
    fn an_identifier_ending_in_r_or_b_starts_no_literal() {
        let code = blank_non_code("for\"x\" in sub\"y\"; pb::Z");
        assert!(code.ends_with("pb::Z"), "{code}");
    }

    #[test]
    fn multibyte_text_in_comments_and_strings() {
        let code = blank_non_code("// — naïve\nlet s = \"héllo\"; let c = 'é'; pb::W");
        assert!(code.ends_with("pb::W"), "{code}");
        assert!(code.is_ascii());
    }
}
