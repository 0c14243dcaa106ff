//! Keyset paging: `page_size` and opaque `page_token`s.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::validation::InvalidField;

pub const DEFAULT_PAGE_SIZE: u32 = 100;
pub const MAX_PAGE_SIZE: u32 = 1000;

/// Where a page starts: after the row with this surrogate key, in the
/// listing's order. Tokens are bound to the resource kind they came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageToken {
    pub after: i64,
}

impl PageToken {
    pub fn encode(self, kind: &str) -> String {
        URL_SAFE_NO_PAD.encode(format!("{kind}:{}", self.after))
    }

    pub fn decode(kind: &str, token: &str) -> Result<Self, InvalidField> {
        let invalid = || {
            InvalidField::new(
                "page_token",
                format!("is not a {kind} page token this API issued"),
            )
        };
        let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| invalid())?;
        let text = String::from_utf8(bytes).map_err(|_| invalid())?;
        let (token_kind, after) = text.split_once(':').ok_or_else(invalid)?;
        if token_kind != kind {
            return Err(invalid());
        }
        let after: i64 = after.parse().map_err(|_| invalid())?;
        if after < 0 {
            return Err(invalid());
        }
        Ok(Self { after })
    }
}

/// A validated request for one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageRequest {
    pub size: u32,
    pub after: Option<PageToken>,
}

impl PageRequest {
    /// `page_size` 0 means the default; negative or above the maximum is an
    /// error, as is a token of another kind.
    pub fn parse(kind: &str, page_size: i32, page_token: &str) -> Result<Self, InvalidField> {
        let size = match page_size {
            0 => DEFAULT_PAGE_SIZE,
            n if n < 0 => {
                return Err(InvalidField::new("page_size", "must not be negative"));
            }
            n if n as u32 > MAX_PAGE_SIZE => {
                return Err(InvalidField::new(
                    "page_size",
                    format!("must be at most {MAX_PAGE_SIZE} (got {n})"),
                ));
            }
            n => n as u32,
        };
        let after = if page_token.is_empty() {
            None
        } else {
            Some(PageToken::decode(kind, page_token)?)
        };
        Ok(Self { size, after })
    }

    pub fn first(size: u32) -> Self {
        Self { size, after: None }
    }
}

/// One page of results and where the next one starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<PageToken>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_are_bound_to_their_kind() {
        let token = PageToken { after: 42 }.encode("hosts");
        assert_eq!(
            PageToken::decode("hosts", &token),
            Ok(PageToken { after: 42 })
        );
        assert_eq!(
            PageToken::decode("segments", &token).unwrap_err().field,
            "page_token"
        );
        assert!(PageToken::decode("hosts", "not base64 !").is_err());
        assert!(PageToken::decode("hosts", &URL_SAFE_NO_PAD.encode("hosts:x")).is_err());
        assert!(PageToken::decode("hosts", &URL_SAFE_NO_PAD.encode("hosts:-1")).is_err());
    }

    #[test]
    fn page_sizes_are_bounded() {
        assert_eq!(
            PageRequest::parse("x", 0, "").unwrap().size,
            DEFAULT_PAGE_SIZE
        );
        assert_eq!(PageRequest::parse("x", 7, "").unwrap().size, 7);
        assert!(PageRequest::parse("x", -1, "").is_err());
        assert!(PageRequest::parse("x", 1001, "").is_err());
    }
}
