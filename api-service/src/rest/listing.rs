//! Masakari's list parameters (`api/openstack/common.py`,
//! `db/sqlalchemy/api.py`): `limit` (at most and by default 1,000),
//! `marker` (the integer `id` of the last item seen; its `uuid` is accepted
//! too), `sort_key`/`sort_dir` (repeatable; `created_at` and `id` are
//! always appended, descending unless a direction was given).
//!
//! The service pages by insertion order only, so a listing reads every
//! item that matches its filters and orders, cuts and pages them here, on
//! the JSON objects the client will see (whose keys are Masakari's column
//! names, so sorting by them is sorting by the columns).

use std::cmp::Ordering;
use std::future::Future;

use serde_json::Value;

use super::error::RestError;
use super::query::Params;
use crate::domain::{MAX_PAGE_SIZE, Page, PageRequest};
use crate::service;

/// Masakari's `osapi_max_limit`.
pub const MAX_LIMIT: usize = 1000;

/// Every item the service lists, page after page.
pub async fn everything<T, F, Fut>(mut fetch: F) -> Result<Vec<T>, service::Error>
where
    F: FnMut(PageRequest) -> Fut,
    Fut: Future<Output = Result<Page<T>, service::Error>>,
{
    let mut items = Vec::new();
    let mut page = PageRequest::first(MAX_PAGE_SIZE);
    loop {
        let batch = fetch(page).await?;
        items.extend(batch.items);
        match batch.next {
            Some(next) => page.after = Some(next),
            None => return Ok(items),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    Asc,
    Desc,
}

/// What part of a listing to return, and in what order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listing {
    limit: usize,
    marker: Option<String>,
    sort: Vec<(String, Direction)>,
}

impl Listing {
    /// Reads `limit`, `marker`, `sort_key` and `sort_dir`; `sort_keys` are
    /// the resource's columns.
    pub fn from_params(params: &Params, sort_keys: &[&str]) -> Result<Self, RestError> {
        for name in ["limit", "page_size"] {
            if let Some(value) = params.get(name) {
                non_negative(name, value)?;
            }
        }
        let limit = params
            .get("limit")
            .map(|v| non_negative("limit", v))
            .transpose()?
            .map_or(MAX_LIMIT, |n| n.min(MAX_LIMIT));
        let mut keys: Vec<String> = params
            .all("sort_key")
            .iter()
            .map(|k| k.trim().to_owned())
            .collect();
        let dirs: Vec<&str> = params.all("sort_dir").iter().map(|d| d.trim()).collect();
        if keys.is_empty() {
            keys.push("created_at".to_owned());
        }
        let dirs = if dirs.is_empty() { vec!["desc"] } else { dirs };
        let mut directions = dirs
            .iter()
            .map(|d| match *d {
                "asc" => Ok(Direction::Asc),
                "desc" => Ok(Direction::Desc),
                _ => Err(RestError::BadRequest(
                    "Invalid input received: Unknown sort direction, must be 'asc' or 'desc'"
                        .to_owned(),
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let default = directions[0];
        if directions.len() > keys.len() {
            return Err(RestError::BadRequest(
                "Invalid input received: Sort direction size exceeds sort key size".to_owned(),
            ));
        }
        directions.resize(keys.len(), default);
        let mut sort: Vec<(String, Direction)> = keys.into_iter().zip(directions).collect();
        for key in ["created_at", "id"] {
            if !sort.iter().any(|(k, _)| k == key) {
                sort.push((key.to_owned(), default));
            }
        }
        if limit > 0
            && let Some((bad, _)) = sort.iter().find(|(k, _)| !sort_keys.contains(&k.as_str()))
        {
            return Err(RestError::BadRequest(format!(
                "Sort key supplied is invalid: {bad}"
            )));
        }
        Ok(Self {
            limit,
            marker: params.get("marker").map(str::to_owned),
            sort,
        })
    }

    /// Orders `items`, starts after the marker and cuts at the limit. A
    /// marker that no longer matches the filters is looked up in
    /// `unfiltered` (read only then), as Masakari finds it in the table.
    pub async fn select(
        &self,
        mut items: Vec<Value>,
        uuid_key: &str,
        unfiltered: impl Future<Output = Result<Vec<Value>, RestError>>,
    ) -> Result<Vec<Value>, RestError> {
        if self.limit == 0 {
            return Ok(Vec::new());
        }
        items.sort_by(|a, b| self.compare(a, b));
        if let Some(marker) = &self.marker {
            let found = match items.iter().find(|i| is_marker(i, marker, uuid_key)) {
                Some(item) => Some(item.clone()),
                None => unfiltered
                    .await?
                    .into_iter()
                    .find(|i| is_marker(i, marker, uuid_key)),
            };
            let Some(marker_item) = found else {
                return Err(RestError::BadRequest(format!(
                    "Marker {marker} could not be found."
                )));
            };
            items.retain(|i| self.compare(i, &marker_item) == Ordering::Greater);
        }
        items.truncate(self.limit);
        Ok(items)
    }

    fn compare(&self, a: &Value, b: &Value) -> Ordering {
        for (key, direction) in &self.sort {
            let ordering = compare_values(
                a.get(key).unwrap_or(&Value::Null),
                b.get(key).unwrap_or(&Value::Null),
            );
            let ordering = match direction {
                Direction::Asc => ordering,
                Direction::Desc => ordering.reverse(),
            };
            if ordering != Ordering::Equal {
                return ordering;
            }
        }
        Ordering::Equal
    }
}

fn non_negative(name: &str, value: &str) -> Result<usize, RestError> {
    let n: i64 = value.trim().parse().map_err(|_| {
        RestError::BadRequest(format!("Invalid input received: {name} must be an integer"))
    })?;
    usize::try_from(n)
        .map_err(|_| RestError::BadRequest(format!("Invalid input received: {name} must be >= 0")))
}

fn is_marker(item: &Value, marker: &str, uuid_key: &str) -> bool {
    let id = item.get("id").and_then(Value::as_i64);
    marker.trim().parse::<i64>().is_ok_and(|n| id == Some(n))
        || item.get(uuid_key).and_then(Value::as_str) == Some(marker)
}

/// NULL first, then booleans, numbers, strings; anything else by its text.
fn compare_values(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Number(_) => 2,
            Value::String(_) => 3,
            Value::Array(_) | Value::Object(_) => 4,
        }
    }
    rank(a).cmp(&rank(b)).then_with(|| match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => x
                .as_f64()
                .partial_cmp(&y.as_f64())
                .unwrap_or(Ordering::Equal),
        },
        (Value::String(x), Value::String(y)) => x.cmp(y),
        _ => a.to_string().cmp(&b.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const KEYS: &[&str] = &["id", "uuid", "name", "created_at"];

    fn items() -> Vec<Value> {
        (1..=5)
            .map(|i| {
                json!({"id": i, "uuid": format!("u{i}"), "name": format!("n{}", 6 - i),
                       "created_at": format!("2026-01-0{}T00:00:00.000000", i.min(3))})
            })
            .collect()
    }

    fn ids(values: &[Value]) -> Vec<i64> {
        values.iter().map(|v| v["id"].as_i64().unwrap()).collect()
    }

    async fn select(pairs: &[(&str, &str)]) -> Result<Vec<i64>, RestError> {
        let listing = Listing::from_params(&Params::from_pairs(pairs), KEYS)?;
        let all = items();
        listing
            .select(items(), "uuid", async { Ok(all) })
            .await
            .map(|v| ids(&v))
    }

    #[tokio::test]
    async fn newest_first_by_default_with_id_breaking_ties() {
        assert_eq!(select(&[]).await.unwrap(), vec![5, 4, 3, 2, 1]);
        assert_eq!(
            select(&[("sort_dir", "asc")]).await.unwrap(),
            vec![1, 2, 3, 4, 5]
        );
        assert_eq!(
            select(&[("sort_key", "name"), ("sort_dir", "asc")])
                .await
                .unwrap(),
            vec![5, 4, 3, 2, 1]
        );
    }

    #[tokio::test]
    async fn markers_and_limits_page() {
        assert_eq!(select(&[("limit", "2")]).await.unwrap(), vec![5, 4]);
        assert_eq!(
            select(&[("limit", "2"), ("marker", "4")]).await.unwrap(),
            vec![3, 2]
        );
        assert_eq!(
            select(&[("limit", "2"), ("marker", "u2")]).await.unwrap(),
            vec![1]
        );
        assert_eq!(select(&[("limit", "0")]).await.unwrap(), Vec::<i64>::new());
        let err = select(&[("marker", "99")]).await.unwrap_err();
        assert_eq!(err.to_string(), "Marker 99 could not be found.");
    }

    #[tokio::test]
    async fn bad_parameters_are_refused() {
        for pairs in [
            vec![("limit", "x")],
            vec![("limit", "-1")],
            vec![("page_size", "-1")],
            vec![("sort_dir", "up")],
            vec![("sort_key", "nope")],
            vec![
                ("sort_key", "name"),
                ("sort_dir", "asc"),
                ("sort_dir", "asc"),
            ],
        ] {
            assert!(
                matches!(select(&pairs).await, Err(RestError::BadRequest(_))),
                "{pairs:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_marker_outside_the_filter_is_found_in_the_table() {
        let listing = Listing::from_params(&Params::from_pairs(&[("marker", "3")]), KEYS).unwrap();
        let filtered: Vec<Value> = items().into_iter().filter(|v| v["id"] != 3).collect();
        let all = items();
        let selected = listing
            .select(filtered, "uuid", async { Ok(all) })
            .await
            .unwrap();
        assert_eq!(ids(&selected), vec![2, 1]);
    }

    #[test]
    fn values_order_null_first() {
        assert_eq!(compare_values(&Value::Null, &json!("a")), Ordering::Less);
        assert_eq!(compare_values(&json!(2), &json!(10)), Ordering::Less);
        assert_eq!(compare_values(&json!("b"), &json!("a")), Ordering::Greater);
        assert_eq!(compare_values(&json!(false), &json!(true)), Ordering::Less);
    }
}
