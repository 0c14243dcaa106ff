//! Waiting in a test for what it expects: [`eventually`] asks a check
//! again and again until it holds or a limit passes, then panics naming
//! what it waited for and what the check last said ([`until`] returns that
//! instead, for a test that collects its problems). Tokio's clock measures
//! the limit, so on paused time a test waits through simulated minutes in
//! no real time.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// What a check of [`eventually`] answers: done with a value, or not yet
/// with what it saw instead.
pub trait Outcome {
    /// What [`eventually`] returns once the check holds.
    type Value;

    /// The value, or what was seen instead (for the panic's message).
    fn into_result(self) -> Result<Self::Value, String>;
}

/// `true` once what is waited for holds.
impl Outcome for bool {
    type Value = ();

    fn into_result(self) -> Result<(), String> {
        if self {
            Ok(())
        } else {
            Err("the check still said no".to_owned())
        }
    }
}

/// `Some` once there is a value.
impl<T> Outcome for Option<T> {
    type Value = T;

    fn into_result(self) -> Result<T, String> {
        self.ok_or_else(|| "the check still found nothing".to_owned())
    }
}

/// `Ok` once there is a value; `Err` says what the check saw instead.
impl<T, E: Display> Outcome for Result<T, E> {
    type Value = T;

    fn into_result(self) -> Result<T, String> {
        self.map_err(|seen| seen.to_string())
    }
}

/// Runs `check` every `every` until it holds (`true`, `Some`, `Ok`) and
/// returns its value; panics once `within` has passed, naming `what` and
/// what the check last said (an `Err`'s text).
pub async fn eventually<F, Fut>(
    what: &str,
    within: Duration,
    every: Duration,
    check: F,
) -> <Fut::Output as Outcome>::Value
where
    F: FnMut() -> Fut,
    Fut: Future,
    Fut::Output: Outcome,
{
    match until(within, every, check).await {
        Ok(value) => value,
        Err(last) => panic!("timed out after {within:?} waiting for {what}; last seen: {last}"),
    }
}

/// [`eventually`] for a test that reports rather than panics: the check's
/// value once it holds, or, once `within` has passed, what it last said.
pub async fn until<F, Fut>(
    within: Duration,
    every: Duration,
    mut check: F,
) -> Result<<Fut::Output as Outcome>::Value, String>
where
    F: FnMut() -> Fut,
    Fut: Future,
    Fut::Output: Outcome,
{
    let deadline = Instant::now() + within;
    loop {
        match check().await.into_result() {
            Ok(value) => return Ok(value),
            Err(last) if Instant::now() >= deadline => return Err(last),
            // sleep: the pause between two checks.
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn returns_what_the_check_found_once_it_holds() {
        let calls = Cell::new(0);
        let started = Instant::now();
        let found = eventually(
            "the third call",
            Duration::from_secs(10),
            Duration::from_secs(1),
            || {
                calls.set(calls.get() + 1);
                let n = calls.get();
                async move { (n == 3).then_some(n * 10) }
            },
        )
        .await;
        assert_eq!(found, 30);
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        eventually("true", Duration::ZERO, Duration::from_secs(1), || async {
            true
        })
        .await;
        let ok: u8 = eventually("ok", Duration::ZERO, Duration::from_secs(1), || async {
            Ok::<u8, String>(7)
        })
        .await;
        assert_eq!(ok, 7);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(
        expected = "timed out after 5s waiting for the volume in-use; last seen: status attaching"
    )]
    async fn panics_naming_what_it_waited_for_and_the_last_state_seen() {
        eventually(
            "the volume in-use",
            Duration::from_secs(5),
            Duration::from_secs(1),
            || async { Err::<(), _>("status attaching") },
        )
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn until_gives_the_last_state_seen() {
        let mut seen = 0;
        let last = until(Duration::from_secs(3), Duration::from_secs(1), || {
            seen += 1;
            let seen = seen;
            async move { Err::<(), _>(format!("seen {seen}")) }
        })
        .await;
        assert_eq!(last, Err("seen 4".to_owned()));
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "waiting for a report; last seen: the check still said no")]
    async fn a_false_check_says_so() {
        eventually(
            "a report",
            Duration::from_secs(1),
            Duration::from_millis(100),
            || async { false },
        )
        .await;
    }
}
