//! The native API's key check, shared by its handlers: the caller's tenant from
//! `Authorization: Bearer`, or a 401 in the native error shape.

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;

use super::error::ApiError;
use super::{AppState, BearerKey, Tenant};

pub(super) fn tenant(state: &AppState, key: &BearerKey) -> Result<Tenant, ApiError> {
    state.auth.tenant(key.as_deref()).map_err(|e| {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            e.code(),
            "send a valid gateway key as `Authorization: Bearer <key>`",
        )
    })
}

/// The caller's tenant from `Authorization: Bearer`, or the 401, as an extractor. Handlers that
/// read a body take it before the body: axum runs it first, so a request without a valid key is
/// answered before a byte of its body is read, and hyper closes the connection instead of
/// reading the rest.
pub(super) struct NativeTenant(pub Tenant);

impl FromRequestParts<AppState> for NativeTenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Ok(key) = BearerKey::from_request_parts(parts, state).await;
        tenant(state, &key).map(NativeTenant)
    }
}
