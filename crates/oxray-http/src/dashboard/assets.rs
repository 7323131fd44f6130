//! The dashboard's static files, embedded in the binary so the wheel serves
//! them on an offline cluster: our stylesheet and scripts, and the vendored
//! htmx and uPlot (`assets/vendor/`, see its README for versions and checksums).

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// (path under `/static/`, content type, bytes)
const FILES: &[(&str, &str, &[u8])] = &[
    ("app.css", "text/css; charset=utf-8", include_bytes!("../../assets/app.css")),
    ("app.js", "text/javascript; charset=utf-8", include_bytes!("../../assets/app.js")),
    ("charts.js", "text/javascript; charset=utf-8", include_bytes!("../../assets/charts.js")),
    ("train.js", "text/javascript; charset=utf-8", include_bytes!("../../assets/train.js")),
    ("tune.js", "text/javascript; charset=utf-8", include_bytes!("../../assets/tune.js")),
    ("serve.js", "text/javascript; charset=utf-8", include_bytes!("../../assets/serve.js")),
    ("vendor/htmx.min.js", "text/javascript; charset=utf-8", include_bytes!("../../assets/vendor/htmx.min.js")),
    (
        "vendor/uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../assets/vendor/uPlot.iife.min.js"),
    ),
    ("vendor/uPlot.min.css", "text/css; charset=utf-8", include_bytes!("../../assets/vendor/uPlot.min.css")),
];

pub(crate) async fn serve(Path(path): Path<String>) -> Response {
    match FILES.iter().find(|(name, _, _)| *name == path) {
        Some((_, content_type, bytes)) => {
            ([(header::CONTENT_TYPE, *content_type), (header::CACHE_CONTROL, "public, max-age=3600")], *bytes)
                .into_response()
        }
        None => (StatusCode::NOT_FOUND, "Not Found").into_response(),
    }
}

pub(crate) async fn favicon() -> Response {
    // An oxide-red dot, so browsers stop asking.
    let svg = r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><circle cx="8" cy="8" r="7" fill="#b7410e"/></svg>"##;
    ([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response()
}
