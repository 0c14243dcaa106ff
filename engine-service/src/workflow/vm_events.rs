//! Which libvirt events reported by an instance monitor call for an
//! instance recovery (Masakari's `instance_events.INSTANCE_EVENTS`).

/// `(event, vir_domain_event)` pairs that trigger a recovery.
const RECOVERABLE: [(&str, &str); 3] = [
    ("LIFECYCLE", "STOPPED_FAILED"),
    ("QEMU_GUEST_AGENT_ERROR", "STOPPED_FAILED"),
    ("IO_ERROR", "IO_ERROR_REPORT"),
];

/// Whether a VM notification's event calls for stopping and starting the
/// instance.
pub fn calls_for_recovery(event: &str, vir_domain_event: &str) -> bool {
    RECOVERABLE
        .iter()
        .any(|(e, v)| *e == event && *v == vir_domain_event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masakari_events() {
        assert!(calls_for_recovery("LIFECYCLE", "STOPPED_FAILED"));
        assert!(calls_for_recovery(
            "QEMU_GUEST_AGENT_ERROR",
            "STOPPED_FAILED"
        ));
        assert!(calls_for_recovery("IO_ERROR", "IO_ERROR_REPORT"));
        assert!(!calls_for_recovery("LIFECYCLE", "STOPPED_DESTROYED"));
        assert!(!calls_for_recovery("REBOOT", "REBOOT"));
    }
}
