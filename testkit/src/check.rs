//! The invariants every terminal notification must hold, as the system
//! tests check them on what the public API answers, and the status of a
//! notification or vmove read off the wire.

use instanceha_proto::v1 as pb;

pub fn status(n: &pb::Notification) -> pb::NotificationStatus {
    pb::NotificationStatus::try_from(n.status).unwrap()
}

pub fn vmove_status(v: &pb::Vmove) -> pb::VmoveStatus {
    pb::VmoveStatus::try_from(v.status).unwrap()
}

/// Asserts that the notification ended `expected`, showing its message.
pub fn assert_status(n: &pb::Notification, expected: pb::NotificationStatus) {
    assert_eq!(status(n), expected, "{}", n.message);
}

/// Invariants every terminal notification must hold.
pub fn assert_honest(n: &pb::Notification, vmoves: &[pb::Vmove]) {
    let status = status(n);
    for v in vmoves {
        let vs = vmove_status(v);
        assert!(
            !matches!(vs, pb::VmoveStatus::Pending | pb::VmoveStatus::Ongoing),
            "{status:?} notification with a {vs:?} vmove for {}",
            v.instance_name
        );
        if vs == pb::VmoveStatus::Failed {
            assert!(v.end_time.is_some(), "failed vmove without end time");
            assert!(!v.message.is_empty(), "failed vmove without message");
        }
    }
    if status == pb::NotificationStatus::Finished {
        assert!(
            vmoves.iter().all(|v| matches!(
                vmove_status(v),
                pb::VmoveStatus::Succeeded | pb::VmoveStatus::Ignored
            )),
            "finished with unsuccessful vmoves"
        );
    }
}
