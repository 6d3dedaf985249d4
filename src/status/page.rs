//! The dashboard page: HTML, CSS and script in one response, put together at compile time from
//! `page/`. No build step, no CDN: the charts are drawn as inline SVG by `page/app.js`.

/// Where the server puts the figures as a plain table for a browser without script (and for
/// `curl`): see [`with_fallback`].
const FALLBACK_MARK: &str = "<!--NOSCRIPT-->";

pub const PAGE: &str = concat!(
    include_str!("page/head.html"),
    "<style>\n",
    include_str!("page/style.css"),
    "</style>\n",
    include_str!("page/body.html"),
    "<script>\n",
    include_str!("page/app.js"),
    "</script>\n</body>\n</html>\n",
);

/// The page with `fallback` (HTML, already escaped) in a `<noscript>` block.
pub fn with_fallback(fallback: &str) -> String {
    PAGE.replacen(
        FALLBACK_MARK,
        &format!("<noscript>{fallback}</noscript>"),
        1,
    )
}
