//! `instanceha notification watch`: follow one notification's
//! `WatchNotification` stream to its end, show it, and say how it ended.

pub mod display;
pub mod state;

use std::io::Write;

use futures::StreamExt as _;

use crate::client::{self, Client};
use crate::error::Error;
use crate::output::Format;
use display::WatchDisplay;
use state::{Outcome, WatchState};

/// Watches `id` until its notification is finished, failed or ignored,
/// writing to `out`.
pub async fn watch(
    client: &Client,
    id: &str,
    format: Format,
    stdout_is_terminal: bool,
    out: &mut dyn Write,
) -> Result<Outcome, Error> {
    let mut display = WatchDisplay::choose(format, stdout_is_terminal);
    let mut state = WatchState::default();
    let followed = follow(client, id, &mut display, &mut state, out).await;
    if let Err(err) = followed {
        display.abandon();
        return Err(err);
    }
    let summary = display.finish(&state)?;
    out.write_all(summary.as_bytes()).map_err(Error::Write)?;
    out.flush().map_err(Error::Write)?;
    state
        .outcome()
        .ok_or_else(|| Error::Api(client::Error::WatchEnded { id: id.to_owned() }))
}

async fn follow(
    client: &Client,
    id: &str,
    display: &mut WatchDisplay,
    state: &mut WatchState,
    out: &mut dyn Write,
) -> Result<(), Error> {
    let mut updates = client.watch_notification(id).await?;
    while let Some(update) = updates.next().await {
        let update = update?;
        let applied = state.apply(update.clone());
        let text = display.show(state, &update, applied)?;
        if !text.is_empty() {
            out.write_all(text.as_bytes()).map_err(Error::Write)?;
            out.flush().map_err(Error::Write)?;
        }
        if state.is_terminal() {
            break;
        }
    }
    Ok(())
}
