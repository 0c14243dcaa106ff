//! The resource commands (`segment`, `host`, `notification`, `vmove`) and
//! what they share: the context they run in, paging, name resolution and
//! printing.

pub mod host;
pub mod notification;
pub mod segment;
pub mod vmove;

use std::future::Future;
use std::io::{IsTerminal as _, Write};

use clap::Args;
use serde::Serialize;

use crate::client::{self, Client};
use crate::config::Settings;
use crate::error::{Error, Exit};
use crate::output::{self, Format, Tabular};
use crate::resources::{HostFilter, Page, SegmentFilter};

/// What every command runs with.
pub struct Context {
    pub settings: Settings,
    pub out: Box<dyn Write>,
    pub stdout_is_terminal: bool,
    /// The columns `--column` picked, in order; empty for all.
    pub columns: Vec<String>,
}

impl Context {
    /// Standard output, and the resolved settings.
    pub fn stdout(settings: Settings) -> Self {
        let stdout = std::io::stdout();
        Self {
            stdout_is_terminal: stdout.is_terminal(),
            out: Box::new(stdout),
            settings,
            columns: Vec::new(),
        }
    }

    /// Refuses, before any call changes anything, a `--column` that the
    /// output will not have (`available`: a list's columns or a record's
    /// fields).
    pub fn check_columns(&self, available: &'static [&'static str]) -> Result<(), Error> {
        output::select(available, &self.columns)?;
        Ok(())
    }

    pub fn format(&self) -> Format {
        self.settings.format
    }

    pub fn client(&self) -> Result<Client, Error> {
        Ok(Client::new(&self.settings)?)
    }

    pub fn print(&mut self, text: &str) -> Result<(), Error> {
        self.out.write_all(text.as_bytes()).map_err(Error::Write)?;
        self.out.flush().map_err(Error::Write)
    }

    pub fn print_one<T: Tabular + Serialize>(&mut self, item: &T) -> Result<Exit, Error> {
        let text = output::render_one(self.format(), &self.columns, item)?;
        self.print(&text)?;
        Ok(Exit::Ok)
    }

    /// Prints the list; when more pages exist, says so on stderr (so that
    /// JSON on stdout stays clean).
    pub fn print_list<T: Tabular + Serialize>(
        &mut self,
        kind: &str,
        listed: Listed<T>,
    ) -> Result<Exit, Error> {
        let text = output::render_list(self.format(), &self.columns, &listed.items)?;
        self.print(&text)?;
        if listed.more {
            eprintln!(
                "more {kind}s exist than the {} shown: add --all to list them all, or raise \
                 --limit (at most 1000)",
                listed.items.len()
            );
        }
        Ok(Exit::Ok)
    }

    /// Reports a deletion.
    pub fn print_deleted(&mut self, kind: &str, id: &str) -> Result<Exit, Error> {
        #[derive(Serialize)]
        struct Deleted<'a> {
            kind: &'a str,
            id: &'a str,
            deleted: bool,
        }
        let text = match self.format().encoding() {
            Some(encoding) => output::encode(
                encoding,
                &Deleted {
                    kind,
                    id,
                    deleted: true,
                },
            )?,
            None => format!("deleted {kind} {id}\n"),
        };
        self.print(&text)?;
        Ok(Exit::Ok)
    }
}

/// `--limit` and `--all`, for every list.
#[derive(Args, Debug, Clone)]
pub struct Paging {
    /// How many to fetch per page (1 to 1000)
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
    /// Follow the pages to the end instead of showing only the first
    #[arg(long)]
    pub all: bool,
}

/// What a list fetched, and whether more pages were left.
#[derive(Debug)]
pub struct Listed<T> {
    pub items: Vec<T>,
    pub more: bool,
}

/// Fetches the first page, or every page with `--all`.
pub async fn fetch_pages<T, F, Fut>(paging: &Paging, mut fetch: F) -> Result<Listed<T>, Error>
where
    F: FnMut(u32, String) -> Fut,
    Fut: Future<Output = Result<Page<T>, client::Error>>,
{
    let mut items = Vec::new();
    let mut token = String::new();
    loop {
        let page = fetch(paging.limit, token).await?;
        items.extend(page.items);
        match page.next_page_token {
            Some(next) if paging.all => token = next,
            Some(_) => return Ok(Listed { items, more: true }),
            None => return Ok(Listed { items, more: false }),
        }
    }
}

fn is_uuid(reference: &str) -> bool {
    uuid::Uuid::try_parse(reference).is_ok()
}

/// One match of a name lookup, or the error for none or several.
fn single_match(kind: &'static str, name: &str, ids: Vec<String>) -> Result<String, Error> {
    let count = ids.len();
    let mut ids = ids.into_iter();
    match (ids.next(), count) {
        (Some(id), 1) => Ok(id),
        (None, _) => Err(Error::NoSuchName {
            kind,
            name: name.to_owned(),
        }),
        (Some(_), _) => Err(Error::AmbiguousName {
            kind,
            name: name.to_owned(),
            count,
        }),
    }
}

/// A segment ID from an ID or a name.
pub async fn segment_id(client: &Client, reference: &str) -> Result<String, Error> {
    if is_uuid(reference) {
        return Ok(reference.to_owned());
    }
    let filter = SegmentFilter {
        name: Some(reference.to_owned()),
        ..SegmentFilter::default()
    };
    let page = client.list_segments(&filter, 2, String::new()).await?;
    single_match(
        "segment",
        reference,
        page.items.into_iter().map(|s| s.id).collect(),
    )
}

/// A host ID from an ID or a name (within `segment_id` when given).
pub async fn host_id(
    client: &Client,
    reference: &str,
    segment_id: Option<&str>,
) -> Result<String, Error> {
    if is_uuid(reference) {
        return Ok(reference.to_owned());
    }
    let filter = HostFilter {
        name: Some(reference.to_owned()),
        segment_id: segment_id.map(str::to_owned),
        ..HostFilter::default()
    };
    let page = client.list_hosts(&filter, 2, String::new()).await?;
    single_match(
        "host",
        reference,
        page.items.into_iter().map(|h| h.id).collect(),
    )
}

/// `--segment` resolved, when given.
pub async fn optional_segment_id(
    client: &Client,
    reference: Option<&str>,
) -> Result<Option<String>, Error> {
    match reference {
        Some(reference) => Ok(Some(segment_id(client, reference).await?)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_lookup_needs_exactly_one_match() {
        assert_eq!(single_match("segment", "a", vec!["1".into()]).unwrap(), "1");
        assert!(matches!(
            single_match("segment", "a", vec![]),
            Err(Error::NoSuchName { .. })
        ));
        assert!(matches!(
            single_match("segment", "a", vec!["1".into(), "2".into()]),
            Err(Error::AmbiguousName { count: 2, .. })
        ));
    }

    #[test]
    fn uuids_are_taken_as_ids() {
        assert!(is_uuid("7d1c2f9e-3b7a-4c59-9a35-1f0e8d8c2a11"));
        assert!(!is_uuid("rack-1"));
    }

    #[tokio::test]
    async fn paging_follows_tokens_only_with_all() {
        let pages = |size: u32, token: String| async move {
            let start: u32 = if token.is_empty() {
                0
            } else {
                token.parse().unwrap()
            };
            let end = (start + size).min(5);
            Ok(Page {
                items: (start..end).collect::<Vec<_>>(),
                next_page_token: (end < 5).then(|| end.to_string()),
            })
        };
        let one = fetch_pages(
            &Paging {
                limit: 2,
                all: false,
            },
            pages,
        )
        .await
        .unwrap();
        assert_eq!(one.items, [0, 1]);
        assert!(one.more);
        let all = fetch_pages(
            &Paging {
                limit: 2,
                all: true,
            },
            pages,
        )
        .await
        .unwrap();
        assert_eq!(all.items, [0, 1, 2, 3, 4]);
        assert!(!all.more);
    }
}
