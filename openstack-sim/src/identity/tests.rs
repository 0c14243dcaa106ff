//! Logins, scopes, service tokens, revocation and expiry.

use super::*;
use rand::SeedableRng;

fn store() -> Identity {
    let mut rng = StdRng::seed_from_u64(1);
    Identity::new(
        &[
            UserSpec::new("admin", "secret", "admin", &["admin"]),
            UserSpec::new("nova", "pw", "service", &["service", "admin"]),
        ],
        &[AppCredentialSpec {
            id: Some("appcred".into()),
            name: "ha".into(),
            user: "admin".into(),
            secret: "s3".into(),
        }],
        &[],
        3600,
        &mut rng,
    )
}

fn by_name(name: &str) -> UserRef {
    UserRef {
        name: Some(name.into()),
        domain_name: Some("Default".into()),
        ..UserRef::default()
    }
}

#[test]
fn password_login_checks_password_and_scope() {
    let mut ids = store();
    let scope = ProjectRef {
        name: Some("admin".into()),
        domain_name: Some("Default".into()),
        ..ProjectRef::default()
    };
    let (token, data) = ids
        .password_login(&by_name("admin"), "secret", Some(&scope))
        .unwrap();
    assert!(token.len() > 150);
    assert_eq!(data.methods, vec!["password"]);
    assert_eq!(
        ids.password_login(&by_name("admin"), "wrong", Some(&scope))
            .unwrap_err(),
        Error::Unauthenticated
    );
    let other = ProjectRef {
        name: Some("service".into()),
        ..ProjectRef::default()
    };
    assert!(
        ids.password_login(&by_name("admin"), "secret", Some(&other))
            .is_err()
    );
    let caller = ids.caller(&token, None).unwrap();
    assert!(caller.is_admin && !caller.is_service);
}

#[test]
fn application_credentials_refuse_a_scope() {
    let mut ids = store();
    assert_eq!(
        ids.application_credential_login(Some("appcred"), None, None, "s3", true)
            .unwrap_err(),
        Error::AppCredentialScope
    );
    let (_, data) = ids
        .application_credential_login(None, Some("ha"), Some(&by_name("admin")), "s3", false)
        .unwrap();
    assert_eq!(data.application_credential.unwrap().0, "appcred");
    assert!(
        ids.application_credential_login(Some("appcred"), None, None, "bad", false)
            .is_err()
    );
}

#[test]
fn service_token_marks_a_service_caller_and_revocation_and_expiry_bite() {
    let mut ids = store();
    let (admin, _) = ids
        .password_login(&by_name("admin"), "secret", None)
        .unwrap();
    let (nova, _) = ids.password_login(&by_name("nova"), "pw", None).unwrap();
    assert!(ids.caller(&admin, Some(&nova)).unwrap().is_service);
    assert!(!ids.caller(&admin, Some(&admin)).unwrap().is_service);
    assert!(ids.revoke(&nova));
    assert_eq!(ids.caller(&admin, Some(&nova)).unwrap_err(), Error::Revoked);
    assert_eq!(ids.expire(Some(&admin), 0.0), 1);
    assert_eq!(ids.validate(&admin).unwrap_err(), Error::Expired);
    assert_eq!(ids.validate("nope").unwrap_err(), Error::UnknownToken);
}
