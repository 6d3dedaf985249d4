use std::collections::HashMap;

use foldhash::fast::RandomState;

use axum::extract::Request;
use axum::http::header;
use bytes::Bytes;

use super::{Mode, Reply, codes};

/// The parameters of one compatible-API request, merged from the query string and the body in
/// whatever encoding the client used: urlencoded, multipart, JSON, or no `Content-Type` at all
/// (the puppeteer plugin sends a chunked urlencoded body without one). Body values win over query
/// values of the same name.
///
/// The maps hash with foldhash rather than SipHash: a body's parameters are looked up a score of
/// times per request, SipHash was a third of parsing a native body (docs/BENCHMARKS.md), and a
/// map that lives for one request, seeded at random, with as many keys as the body limit allows,
/// needs no more than foldhash's resistance to chosen collisions.
#[derive(Debug, Clone, Default)]
pub struct Params {
    values: HashMap<String, String, RandomState>,
    files: HashMap<String, Bytes, RandomState>,
}

/// Whether `body` declares (`Content-Length`) more than `max` bytes: refused before a byte of it
/// is read, where reading up to the limit first would only waste the time.
pub fn declared_over(body: &axum::body::Body, max: usize) -> bool {
    use axum::body::HttpBody;
    body.size_hint().lower() > u64::try_from(max).unwrap_or(u64::MAX)
}

impl Params {
    /// Reads parameters from a query string and a body. Never fails: a body that does not parse
    /// as its declared encoding contributes nothing, and the missing parameters are reported by
    /// whoever needs them, in the caller's protocol.
    pub async fn read(query: Option<&str>, content_type: Option<&str>, body: Bytes) -> Params {
        let mut params = Params::default();
        if let Some(q) = query {
            params.extend_urlencoded(q.as_bytes());
        }
        let ct = content_type.unwrap_or("").to_ascii_lowercase();
        if ct.starts_with("multipart/form-data") {
            params
                .extend_multipart(content_type.unwrap_or(""), body)
                .await;
        } else if ct.starts_with("application/json") {
            params.extend_json(&body);
        } else if !body.is_empty() {
            // urlencoded, text/plain and no Content-Type at all: all parsed as urlencoded.
            params.extend_urlencoded(&body);
        }
        params
    }

    /// Reads an HTTP request's parameters, or the reply for a body over `max_body` bytes: that
    /// one is answered `ERROR_TOO_BIG_CAPTCHA_FILESIZE` in the mode the query asked for (the
    /// body's own `json` flag was never read).
    pub async fn from_request(req: Request, max_body: usize) -> Result<Params, Reply> {
        let (parts, body) = req.into_parts();
        let query = parts.uri.query();
        let content_type = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        let read = if declared_over(&body, max_body) {
            Err(())
        } else {
            axum::body::to_bytes(body, max_body).await.map_err(drop)
        };
        match read {
            Ok(body) => Ok(Params::read(query, content_type, body).await),
            Err(_) => {
                let query_only = Params::read(query, None, Bytes::new()).await;
                let mode = Mode::from_json_flag(query_only.wants_json());
                Err(Reply::error(mode, codes::TOO_BIG_CAPTCHA_FILESIZE))
            }
        }
    }

    /// Builds parameters from name/value pairs (tests, the simulator's own client).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Params {
        let mut params = Params::default();
        for (k, v) in pairs {
            params.values.insert(k.to_owned(), v.to_owned());
        }
        params
    }

    /// Sets one value, replacing what the client sent under that name.
    pub fn set(&mut self, name: &str, value: impl Into<String>) {
        self.values.insert(name.to_owned(), value.into());
    }

    /// Forgets a value.
    pub fn remove(&mut self, name: &str) {
        self.values.remove(name);
    }

    pub fn insert_file(&mut self, name: &str, data: Bytes) {
        self.files.insert(name.to_owned(), data);
    }

    /// The first non-empty value among `names` (aliases, in order of preference).
    pub fn get(&self, names: &[&str]) -> Option<&str> {
        names
            .iter()
            .filter_map(|n| self.values.get(*n))
            .map(|v| v.trim())
            .find(|v| !v.is_empty())
    }

    /// A flag sent as `1`/`0` (or `true`/`false`): clients send `enterprise=0` literally, so
    /// presence alone never means on.
    pub fn flag(&self, names: &[&str]) -> bool {
        matches!(
            self.get(names).map(|v| v.to_ascii_lowercase()).as_deref(),
            Some("1" | "true" | "yes" | "on")
        )
    }

    /// Every parameter and file name with its value (a file's is empty), in no order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        let values = self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let files = self.files.keys().map(|k| (k.as_str(), "<file>"));
        values.chain(files)
    }

    /// The `name[key]=value` parameters (how `in.php` carries an object, such as FunCaptcha's
    /// `data[blob]`), as `(key, value)` sorted by key; blank values left out.
    pub fn keyed(&self, name: &str) -> Vec<(&str, &str)> {
        let mut out: Vec<(&str, &str)> = self
            .values
            .iter()
            .filter_map(|(k, v)| {
                let key = k.strip_prefix(name)?.strip_prefix('[')?.strip_suffix(']')?;
                let v = v.trim();
                (!key.is_empty() && !v.is_empty()).then_some((key, v))
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// Every uploaded file with its field's name, in no order.
    pub fn files(&self) -> impl Iterator<Item = (&str, &Bytes)> {
        self.files.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn file(&self, name: &str) -> Option<&Bytes> {
        self.files.get(name)
    }

    /// Whether `json=1` asked for JSON replies.
    pub fn wants_json(&self) -> bool {
        self.flag(&["json"])
    }

    fn extend_urlencoded(&mut self, raw: &[u8]) {
        for (k, v) in form_urlencoded::parse(raw) {
            self.values.insert(k.into_owned(), v.into_owned());
        }
    }

    /// Parameters from an already parsed JSON object (the native API parses its body once).
    pub fn from_json_object(map: serde_json::Map<String, serde_json::Value>) -> Params {
        let mut params = Params::default();
        params.extend_json_object(map);
        params
    }

    fn extend_json(&mut self, body: &[u8]) {
        if let Ok(serde_json::Value::Object(map)) = serde_json::from_slice(body) {
            self.extend_json_object(map);
        }
    }

    fn extend_json_object(&mut self, map: serde_json::Map<String, serde_json::Value>) {
        for (k, v) in map {
            self.insert_json(k, v);
        }
    }

    /// One JSON field as a parameter: a string as it is, a number or a flag as its text, null
    /// as nothing (an earlier value of the name stays), anything else as its JSON text.
    pub fn insert_json(&mut self, name: String, value: serde_json::Value) {
        let text = match value {
            serde_json::Value::String(s) => s,
            serde_json::Value::Number(n) => n.to_string(),
            serde_json::Value::Bool(b) => if b { "1" } else { "0" }.to_owned(),
            serde_json::Value::Null => return,
            other => other.to_string(),
        };
        self.values.insert(name, text);
    }

    async fn extend_multipart(&mut self, content_type: &str, body: Bytes) {
        let Ok(boundary) = multer::parse_boundary(content_type) else {
            return;
        };
        let stream = futures::stream::once(async move { Ok::<_, std::io::Error>(body) });
        let mut multipart = multer::Multipart::new(stream, boundary);
        while let Ok(Some(field)) = multipart.next_field().await {
            let Some(name) = field.name().map(str::to_owned) else {
                continue;
            };
            let is_file = field.file_name().is_some();
            let Ok(data) = field.bytes().await else {
                return;
            };
            if is_file {
                self.files.insert(name, data);
            } else {
                self.values
                    .insert(name, String::from_utf8_lossy(&data).into_owned());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn merges_query_and_every_body_encoding() {
        let p = Params::read(
            Some("key=abc&json=1"),
            Some("application/x-www-form-urlencoded"),
            Bytes::from_static(b"method=userrecaptcha&googlekey=k"),
        )
        .await;
        assert_eq!(p.get(&["key"]), Some("abc"));
        assert_eq!(p.get(&["googlekey"]), Some("k"));
        assert!(p.wants_json());

        let p = Params::read(None, None, Bytes::from_static(b"method=post&enterprise=0")).await;
        assert_eq!(p.get(&["method"]), Some("post"));
        assert!(!p.flag(&["enterprise"]));

        let p = Params::read(
            None,
            Some("application/json"),
            Bytes::from_static(br#"{"json":1,"method":"base64","body":"aGk=","soft_id":4587}"#),
        )
        .await;
        assert!(p.wants_json());
        assert_eq!(p.get(&["soft_id"]), Some("4587"));

        let body = "--XX\r\nContent-Disposition: form-data; name=\"method\"\r\n\r\npost\r\n--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"c.png\"\r\nContent-Type: image/png\r\n\r\nPNGDATA\r\n--XX--\r\n";
        let p = Params::read(
            Some("key=k"),
            Some("multipart/form-data; boundary=XX"),
            Bytes::from(body),
        )
        .await;
        assert_eq!(p.get(&["method"]), Some("post"));
        assert_eq!(p.file("file").map(|b| &b[..]), Some(&b"PNGDATA"[..]));
    }

    #[tokio::test]
    async fn garbage_bodies_contribute_nothing() {
        for ct in [
            Some("application/json"),
            Some("multipart/form-data; boundary=z"),
            None,
        ] {
            let p = Params::read(Some("a=1"), ct, Bytes::from_static(b"\xff\x00{{--z")).await;
            assert_eq!(p.get(&["a"]), Some("1"));
        }
    }
}
