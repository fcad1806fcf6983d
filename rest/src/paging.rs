//! `limit` and `cursor` of the paged lists (activity, feedback, threads, notes): 1 to 200 entries, 50 by default,
//! and an opaque cursor that is the position of the last entry handed out.

use serde::Deserialize;

use slipway_core::error::ApiError;

/// Default page size of paged lists.
pub const DEFAULT_LIMIT: i64 = 50;
/// Largest page size of paged lists.
pub const MAX_LIMIT: i64 = 200;

/// `limit` and `cursor` of a paged list.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Entries per page, 1 to 200 (default 50).
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page; omitted for the first.
    pub cursor: Option<String>,
}

impl PageQuery {
    /// The page size, or 400 `bad_request` out of range.
    pub fn limit(&self) -> Result<i64, ApiError> {
        match self.limit {
            None => Ok(DEFAULT_LIMIT),
            Some(limit) if (1..=MAX_LIMIT).contains(&limit) => Ok(limit),
            Some(limit) => Err(ApiError::bad_request(format!(
                "limit must be between 1 and {MAX_LIMIT}, not {limit}"
            ))),
        }
    }

    /// The position the page starts after, or 400 `bad_request` for a cursor this API did not hand out.
    pub fn after(&self) -> Result<Option<i64>, ApiError> {
        self.cursor
            .as_deref()
            .map(|c| {
                c.parse::<i64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| ApiError::bad_request("cursor is not one this API handed out"))
            })
            .transpose()
    }
}

/// The cursor of the page after one that ended at `last`, when the page was full.
pub fn next_cursor(page_len: usize, limit: i64, last: Option<i64>) -> Option<String> {
    (i64::try_from(page_len).ok() == Some(limit))
        .then_some(last)
        .flatten()
        .map(|id| id.to_string())
}

/// `value` of a free-text field (a note, a title, a feedback message): not blank and at most `max` characters;
/// 400 `bad_request` naming `field` otherwise.
pub fn text<'a>(field: &str, value: &'a str, max: usize) -> Result<&'a str, ApiError> {
    if value.trim().is_empty() {
        return Err(ApiError::bad_request(format!("{field} must not be empty")));
    }
    let length = value.chars().count();
    if length > max {
        return Err(ApiError::bad_request(format!(
            "{field} is {length} characters; at most {max}"
        )));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_size_outside_one_to_two_hundred_is_refused() {
        let page = |limit| PageQuery {
            limit,
            cursor: None,
        };
        assert_eq!(page(None).limit().unwrap(), 50);
        assert_eq!(page(Some(1)).limit().unwrap(), 1);
        assert_eq!(page(Some(200)).limit().unwrap(), 200);
        assert!(page(Some(0)).limit().is_err());
        assert!(page(Some(201)).limit().is_err());
    }

    #[test]
    fn only_a_cursor_handed_out_is_taken() {
        let cursor = |c: &str| PageQuery {
            limit: None,
            cursor: Some(c.to_owned()),
        };
        assert_eq!(cursor("17").after().unwrap(), Some(17));
        assert!(cursor("abc").after().is_err());
        assert!(cursor("-3").after().is_err());
        assert_eq!(PageQuery::default().after().unwrap(), None);
    }

    #[test]
    fn a_full_page_has_a_next_cursor_and_a_short_one_none() {
        assert_eq!(next_cursor(2, 2, Some(9)), Some("9".to_owned()));
        assert_eq!(next_cursor(1, 2, Some(9)), None);
        assert_eq!(next_cursor(0, 2, None), None);
    }

    #[test]
    fn free_text_is_neither_blank_nor_longer_than_its_limit() {
        assert_eq!(text("body", "hi", 5).unwrap(), "hi");
        assert!(text("body", " \n ", 5).is_err());
        assert!(text("body", "ééééé", 5).is_ok(), "characters, not bytes");
        assert!(text("body", "123456", 5).is_err());
    }
}
