//! The dashboard page: HTML, CSS and script in one response, put together at compile time from
//! `page/`. No build step, no CDN: the charts are drawn as inline SVG by `page/app.js`.

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
