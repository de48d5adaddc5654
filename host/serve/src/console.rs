//! The web console: one page, a script and a style sheet, served as they are (no build step).
//! They hold no data; everything they show comes from the API with the token the user enters,
//! kept in the browser tab's session storage. Text from models, tools and plugins is only ever
//! inserted as text, never as markup.

use axum::http::header;
use axum::response::IntoResponse;

pub(crate) async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_FRAME_OPTIONS, "DENY"),
        ],
        include_str!("console/index.html"),
    )
}

pub(crate) async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("console/console.js"),
    )
}

pub(crate) async fn style() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("console/console.css"),
    )
}

/// The page may load only its own script and style and talk only to its own origin; no inline
/// script runs, so text that slipped into markup still could not execute.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
