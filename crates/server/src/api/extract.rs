//! Extractors whose rejections speak the API's error envelope and name the
//! field at fault: a JSON body, a query string, a job id in the path.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::error::ApiError;

/// A JSON object body of type `T`: 415 unless the content type is JSON,
/// 413 over the body limit, 400 `MALFORMED_JSON` for bad syntax, 400
/// `INVALID_FIELD` (naming the field) for a wrong type, a missing field or
/// an unknown one, or (naming `body`) for a body that is not an object or
/// carries a number it would store rounded (see `jobwire_core::json_numbers`).
pub(crate) struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let is_json = request
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(';').next())
            .map(|mime| {
                let mime = mime.trim().to_ascii_lowercase();
                mime == "application/json"
                    || (mime.starts_with("application/") && mime.ends_with("+json"))
            })
            .unwrap_or(false);
        if !is_json {
            return Err(ApiError::UnsupportedMediaType);
        }
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::PayloadTooLarge {
                        message: format!(
                            "The request body is over the server's limit of {} bytes.",
                            super::BODY_LIMIT_BYTES
                        ),
                        field: None,
                    }
                } else {
                    ApiError::bad_request("UNREADABLE_BODY", rejection.body_text())
                }
            })?;
        // Every body is an object. serde would also fill a struct from an
        // array, by position: `["send_email", {}, ...]` must not enqueue.
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            // A malformed body is malformed whatever it starts with.
            let mut deserializer = serde_json::Deserializer::from_slice(&bytes);
            serde::de::IgnoredAny::deserialize(&mut deserializer)
                .and_then(|_| deserializer.end())
                .map_err(|err| malformed(&err))?;
            return Err(ApiError::invalid_field(
                "body",
                "must be a JSON object ({...})",
            ));
        }
        let mut deserializer = serde_json::Deserializer::from_slice(&bytes);
        let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
            let path = err.path().to_string();
            let inner = err.into_inner();
            match inner.classify() {
                serde_json::error::Category::Data => {
                    let message = inner.to_string();
                    let named = field_named_in(&message);
                    let field = match (path.as_str(), named) {
                        // At the top, serde names the field in its message
                        // (missing, unknown or duplicate).
                        (".", named) => named.unwrap_or_else(|| "body".to_owned()),
                        // A missing field is reported at the object that
                        // lacks it: name the field itself
                        // ("enqueueRate.perSeconds").
                        (_, Some(missing)) if message.starts_with("missing field") => {
                            format!("{path}.{missing}")
                        }
                        _ => path,
                    };
                    let plain = in_plain_words(strip_position(&message), &field);
                    ApiError::invalid_field(field, plain)
                }
                _ => malformed(&inner),
            }
        })?;
        // Trailing bytes after the value ("{}{}") are malformed JSON too.
        deserializer.end().map_err(|err| malformed(&err))?;
        if let Some(number) = jobwire_core::json_numbers::first_inexact_number(&bytes) {
            return Err(ApiError::invalid_field(
                "body",
                format!(
                    "the number {number} would be stored as another (the API keeps numbers as \
                     64-bit integers or doubles, at most 17 significant digits): send it as a string"
                ),
            ));
        }
        Ok(JsonBody(value))
    }
}

fn malformed(err: &serde_json::Error) -> ApiError {
    ApiError::bad_request(
        "MALFORMED_JSON",
        format!("The body is not valid JSON: {err}"),
    )
}

/// serde names a missing or unknown field in backticks: "missing field `type`".
fn field_named_in(message: &str) -> Option<String> {
    let start = message.find('`')? + 1;
    let end = start + message[start..].find('`')?;
    Some(message[start..end].to_owned())
}

/// The values a field takes where they are narrower than its Rust type's
/// range (checked after parsing, by the store): a number out of the type's
/// range names these, not the type's.
fn field_range(field: &str) -> Option<String> {
    match field.rsplit('.').next()? {
        "maxAttempts" => Some(format!("expected a whole number from 1 to {}", i32::MAX)),
        "maxQueued" | "maxRunning" | "depth" | "jobs" => Some(format!(
            "expected a whole number from 1 to {}",
            jobwire_core::MAX_LIMIT
        )),
        "perSeconds" => Some(format!(
            "expected a whole number of seconds from 1 to {}",
            jobwire_core::MAX_RATE_SECONDS
        )),
        "jitterSeconds" => Some(format!(
            "expected a whole number of seconds from 0 to {}",
            jobwire_core::store::MAX_JITTER_SECONDS
        )),
        "maxCatchUp" => Some(format!(
            "expected a whole number from 1 to {}",
            jobwire_core::store::MAX_CATCH_UP
        )),
        _ => None,
    }
}

/// serde names the Rust type it wanted ("expected i16"): say the range,
/// the field's own where it is narrower.
fn in_plain_words(message: &str, field: &str) -> String {
    const RANGES: [(&str, &str); 6] = [
        (
            "expected i16",
            "expected a whole number from -32768 to 32767",
        ),
        ("expected u16", "expected a whole number from 0 to 65535"),
        (
            "expected i32",
            "expected a whole number from -2147483648 to 2147483647",
        ),
        (
            "expected u32",
            "expected a whole number from 0 to 4294967295",
        ),
        (
            "expected i64",
            "expected a whole number from -9223372036854775808 to 9223372036854775807",
        ),
        (
            "expected u64",
            "expected a whole number from 0 to 18446744073709551615",
        ),
    ];
    RANGES
        .iter()
        .find(|(rust, _)| message.ends_with(rust))
        .map(|(rust, plain)| {
            let plain = field_range(field).unwrap_or_else(|| (*plain).to_owned());
            format!("{}{plain}", &message[..message.len() - rust.len()])
        })
        .unwrap_or_else(|| message.to_owned())
}

/// serde_json ends data errors with " at line 1 column 20": noise in an API error.
fn strip_position(message: &str) -> &str {
    message
        .rfind(" at line ")
        .map(|at| &message[..at])
        .unwrap_or(message)
}

/// A query string of type `T`: 400 `INVALID_QUERY` naming the parameter.
pub(crate) struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        // Deserialized here rather than by axum's `Query`, whose rejection
        // is only text: the error names the parameter in `field`.
        let query = parts.uri.query().unwrap_or_default();
        let deserializer =
            serde_urlencoded::Deserializer::new(url::form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(deserializer)
            .map(QueryParams)
            .map_err(|err| {
                let path = err.path().to_string();
                let message = err.into_inner().to_string();
                // An unknown or missing parameter is named in the message.
                let field = if path == "." {
                    field_named_in(&message)
                } else {
                    Some(path)
                };
                match field {
                    // The message names it already ("unknown field `colour`").
                    Some(field) if message.contains(&format!("`{field}`")) => {
                        ApiError::BadRequest {
                            code: "INVALID_QUERY",
                            message,
                            field: Some(field),
                        }
                    }
                    Some(field) => ApiError::invalid_query(field, message),
                    None => ApiError::bad_request("INVALID_QUERY", message),
                }
            })
    }
}

/// The query of a route that takes none: any parameter is refused as
/// `INVALID_QUERY` naming it, as an unknown body field is, rather than
/// ignored (`GET /schedules?limit=1` must not look like it limited).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoQuery {}

/// The `{jobId}` of a path: 400 `INVALID_JOB_ID` unless it is a UUID.
pub(crate) struct JobIdPath(pub Uuid);

impl<S: Send + Sync> FromRequestParts<S> for JobIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::bad_request("INVALID_PATH", rejection.body_text()))?;
        raw.parse().map(JobIdPath).map_err(|_| {
            ApiError::bad_request(
                "INVALID_JOB_ID",
                format!("{raw:?} is not a job id (a UUID)."),
            )
        })
    }
}

/// What a queue name must be, as every refusal of one says it.
pub(crate) const QUEUE_NAME_RULE: &str =
    "A queue name is 1 to 255 bytes, not blank, with no control characters.";

/// A queue name as a path names it, checked by the enqueue's rules (the
/// API's and the dashboard's pause and resume both check it).
pub(crate) fn check_queue_name(name: &str) -> Result<(), ApiError> {
    jobwire_core::validate_queue(name)
        .map_err(|_| ApiError::bad_request("INVALID_QUEUE", QUEUE_NAME_RULE))
}

/// The `{name}` of a queue path.
pub(crate) struct QueuePath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for QueuePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(name) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::bad_request("INVALID_PATH", rejection.body_text()))?;
        check_queue_name(&name)?;
        Ok(QueuePath(name))
    }
}

/// The `{name}` and `{tenant}` of a tenant path; a blank or over-long
/// tenant is a 400 like a bad queue name.
pub(crate) struct TenantPath(pub String, pub String);

impl<S: Send + Sync> FromRequestParts<S> for TenantPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path((queue, tenant)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::bad_request("INVALID_PATH", rejection.body_text()))?;
        check_queue_name(&queue)?;
        jobwire_core::validate_tenant(&tenant).map_err(|_| {
            ApiError::invalid_field(
                "tenant",
                "must be 1 to 255 bytes, not blank, with no control characters",
            )
        })?;
        Ok(TenantPath(queue, tenant))
    }
}

/// The `{name}` of a schedule path.
pub(crate) struct SchedulePath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for SchedulePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(name) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::bad_request("INVALID_PATH", rejection.body_text()))?;
        // Asked here, as a queue's name is: a name no schedule can have
        // reached the database (a NUL was refused there, unclearly) or
        // answered 404.
        jobwire_core::validate_schedule_name(&name).map_err(|_| {
            ApiError::bad_request(
                "INVALID_SCHEDULE_NAME",
                "A schedule's name is 1 to 128 letters, digits and . _ : -, starting with a letter or digit.",
            )
        })?;
        Ok(SchedulePath(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_messages_give_up_their_field_and_lose_their_position() {
        assert_eq!(
            field_named_in("missing field `type` at line 1 column 2").as_deref(),
            Some("type")
        );
        assert_eq!(
            strip_position("invalid type: string \"x\", expected i16 at line 1 column 20"),
            "invalid type: string \"x\", expected i16"
        );
        assert_eq!(strip_position("no position"), "no position");
    }

    #[test]
    fn a_number_out_of_range_names_the_fields_own_range_where_narrower() {
        assert_eq!(
            in_plain_words(
                "invalid value: integer `3000000000`, expected i32",
                "maxAttempts"
            ),
            "invalid value: integer `3000000000`, expected a whole number from 1 to 2147483647"
        );
        assert_eq!(
            in_plain_words("invalid value: integer `-1`, expected u32", "shed.depth"),
            "invalid value: integer `-1`, expected a whole number from 1 to 1000000000"
        );
        assert_eq!(
            in_plain_words("invalid value: integer `70000`, expected i16", "priority"),
            "invalid value: integer `70000`, expected a whole number from -32768 to 32767"
        );
    }
}
