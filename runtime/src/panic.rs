//! What a caught panic said, in one place: its `&str` or `String`
//! payload, or a note that it carried something else.

use std::any::Any;

/// The message of a panic payload caught with `catch_unwind`.
pub fn message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_payload_kinds_are_read() {
        let literal = std::panic::catch_unwind(|| panic!("boom")).unwrap_err();
        assert_eq!(message(literal.as_ref()), "boom");
        let formatted = std::panic::catch_unwind(|| panic!("boom {}", 2)).unwrap_err();
        assert_eq!(message(formatted.as_ref()), "boom 2");
        let other = std::panic::catch_unwind(|| std::panic::panic_any(7u8)).unwrap_err();
        assert_eq!(message(other.as_ref()), "a panic without a message");
    }
}
