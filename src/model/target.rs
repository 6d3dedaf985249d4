use std::fmt;

use sha2::{Digest, Sha256};

use super::{IdForm, Identity, Kind, PAGE, Passthrough, SolveRequest, TaskParams};

/// How page URLs are normalized into target keys. Seed 000 advises keying on the page without its
/// query string: tokens are bound to the sitekey and the page's origin, not to `?session=...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetPolicy {
    /// Drop the query string (default true). The fragment is always dropped: it never reaches a server.
    pub drop_query: bool,
}

impl Default for TargetPolicy {
    fn default() -> Self {
        Self { drop_query: true }
    }
}

/// What makes two requests interchangeable (docs/ARCHITECTURE.md, "Targets"): kind, sitekey,
/// normalized page URL and every parameter that changes the answer. `id` is a digest of those so
/// store keys stay short and never contain proxy credentials; `label` is a human-readable,
/// secret-free name.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Target {
    pub kind: Kind,
    pub id: String,
    pub label: String,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.label, &self.id[..12.min(self.id.len())])
    }
}

impl Target {
    pub fn of(req: &SolveRequest, policy: TargetPolicy) -> Target {
        let kind = req.kind();
        let mut id = IdDigest::new(kind.as_str());
        let flag = |b: bool| if b { "true" } else { "false" };
        let label = match &req.params {
            TaskParams::Recaptcha {
                sitekey,
                pageurl,
                enterprise,
                invisible,
                action,
                min_score,
                data_s,
                domain,
                ..
            } => {
                let (page, host) = normalized(pageurl, policy);
                id.part("sitekey", sitekey);
                id.part("page", &page);
                id.part("enterprise", flag(*enterprise));
                id.part("invisible", flag(*invisible));
                id.part("action", action.as_deref().unwrap_or(""));
                id.part("min_score", min_score.as_deref().unwrap_or(""));
                id.part("data_s", data_s.as_deref().unwrap_or(""));
                id.part("domain", domain.as_deref().unwrap_or(""));
                format!("{kind}:{host}")
            }
            TaskParams::Passthrough(pass) => {
                // Nothing is known of its fields, so all of them are the identity; the label
                // holds only the type's bounded name.
                id.part("protocol", pass.protocol().as_str());
                match pass {
                    Passthrough::InPhp { fields, files } => {
                        for (name, value) in fields {
                            id.part(name, value);
                        }
                        for (name, file) in files {
                            id.part(name, &hex::encode(Sha256::digest(file)));
                        }
                    }
                    Passthrough::TaskApi { task } => {
                        id.part("task", &serde_json::to_string(task).unwrap_or_default());
                    }
                }
                format!("{kind}:{}", pass.label())
            }
            TaskParams::Declared { kind, values } => match kind.spec().identity {
                Identity::Declared => {
                    // Every declared parameter changes the answer; the page as every kind keys it.
                    let mut host = None;
                    for (name, value) in values {
                        if *name == PAGE.name {
                            let (page, page_host) = normalized(value, policy);
                            id.part(name, &page);
                            host = Some(page_host);
                        } else {
                            id.part(name, value);
                        }
                    }
                    match host {
                        Some(host) => format!("{kind}:{host}"),
                        None => kind.as_str().to_owned(),
                    }
                }
                Identity::Computed(parts) => {
                    parts(values, &mut |name, value| id.part(name, value));
                    kind.as_str().to_owned()
                }
                Identity::Parts(parts) => {
                    let value = |param| req.params.declared(param).unwrap_or("");
                    let page = values
                        .iter()
                        .find(|(name, _)| *name == PAGE.name)
                        .map(|(_, page)| normalized(page, policy));
                    for part in parts {
                        match part.form {
                            IdForm::Text => id.part(part.part, value(part.param)),
                            IdForm::Page => id.part(part.part, page.as_ref().map_or("", |p| &p.0)),
                            IdForm::Host => id.part(part.part, page.as_ref().map_or("", |p| &p.1)),
                        }
                    }
                    match page {
                        Some((_, host)) => format!("{kind}:{host}"),
                        None => kind.as_str().to_owned(),
                    }
                }
            },
        };
        // An answer bound to a proxy or UA only works with that proxy and UA.
        if req.proxy.is_some() || kind.spec().needs_proxy {
            let proxy = req.proxy.as_ref();
            id.part("proxy", proxy.map(|p| p.address.as_str()).unwrap_or(""));
            id.part("proxytype", proxy.map(|p| p.kind.as_str()).unwrap_or(""));
            id.part("ua", req.user_agent.as_deref().unwrap_or(""));
        }
        // An isolated tenant's targets are its own (`pools = "isolated"`).
        if let Some(tenant) = &req.partition {
            id.part("tenant", tenant);
        }
        Target {
            kind,
            id: id.finish(),
            label,
        }
    }
}

/// The digest behind a target id: the kind, then `name=value` parts, each length-prefixed so
/// that no two part lists digest alike. Fed piece by piece: the id is on every caller's path,
/// and formatting each part into a string of its own cost more than the hash.
struct IdDigest(Sha256);

impl IdDigest {
    fn new(kind: &str) -> Self {
        let mut digest = IdDigest(Sha256::new());
        digest.prefixed(&[kind]);
        digest
    }

    fn part(&mut self, name: &str, value: &str) {
        self.prefixed(&[name, "=", value]);
    }

    /// One part made of `pieces`, after its length.
    fn prefixed(&mut self, pieces: &[&str]) {
        let len: usize = pieces.iter().map(|p| p.len()).sum();
        self.0.update((len as u64).to_le_bytes());
        for piece in pieces {
            self.0.update(piece.as_bytes());
        }
    }

    fn finish(self) -> String {
        hex::encode(&self.0.finalize()[..16])
    }
}

/// A page URL as it enters a target's identity. Lower-cases scheme and host (the `url` crate
/// does), drops user info (`user:secret@`) and the fragment always and the query when the policy
/// says so, and drops a trailing `/` on the path unless it is the root. Unparsable URLs become an
/// empty string: validation rejects them before they get here, and whatever they hold must not
/// reach a label.
///
/// User info is not part of the page: it is HTTP credentials for the site, which neither the
/// captcha's sitekey nor its token is bound to (the widget reports the page's origin, which has no
/// user info), so two URLs differing only in it are one target. Keeping it, even digested, would
/// split one site's pool by whoever's credentials came along.
///
/// Returns the normalized URL and its [`host_of`], from one parse.
fn normalized(raw: &str, policy: TargetPolicy) -> (String, String) {
    let Ok(mut url) = url::Url::parse(raw.trim()) else {
        return (String::new(), String::new());
    };
    // Each setter rewrites the URL's text, so only what is there is removed. Both user info
    // setters fail only for URLs that cannot have user info (no host), which have none to drop.
    if !url.username().is_empty() {
        let _ = url.set_username("");
    }
    if url.password().is_some() {
        let _ = url.set_password(None);
    }
    if url.fragment().is_some() {
        url.set_fragment(None);
    }
    if policy.drop_query && url.query().is_some() {
        url.set_query(None);
    }
    let path = url.path();
    if path.len() > 1 && path.ends_with('/') {
        let trimmed = path.trim_end_matches('/').to_owned();
        url.set_path(&trimmed);
    }
    let host = host_and_port(&url);
    (String::from(url), host)
}

/// `host` or `host:port` of a normalized URL: the only part of a caller's page that reaches a
/// label (metrics, `/`, `/v1/pools`, logs). Never user info, path or query.
pub(super) fn host_of(url: &str) -> String {
    url::Url::parse(url)
        .map(|url| host_and_port(&url))
        .unwrap_or_default()
}

fn host_and_port(url: &url::Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_owned(),
        (None, _) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v2(page: &str) -> SolveRequest {
        SolveRequest::recaptcha_v2("6Le-key", page)
    }

    /// Target ids name Redis keys and survive upgrades: a change to how they are computed would
    /// split every pool and waiting line of a fleet mid-rollout. These were computed by the
    /// first implementation.
    #[test]
    fn target_ids_and_labels_stay_as_first_computed() {
        use crate::model::{Proxy, ProxyType};
        let mut enterprise = v2("https://user:secret@Shop.Example.com:8443/a/b/?q=1#frag");
        if let TaskParams::Recaptcha {
            enterprise: e,
            invisible,
            action,
            min_score,
            domain,
            ..
        } = &mut enterprise.params
        {
            *e = true;
            *invisible = true;
            *action = Some("login".into());
            *min_score = Some("0.3".into());
            *domain = Some("recaptcha.net".into());
        }
        // Kept as computed when Turnstile's parameters had fields of their own.
        let mut proxied = SolveRequest::new(TaskParams::declared_of(
            Kind::Turnstile,
            &[
                ("sitekey", "0x4AAA"),
                ("pageurl", "https://example.com/"),
                ("action", "signup"),
                ("pagedata", "pd"),
            ],
        ));
        proxied.proxy = Some(Proxy {
            kind: ProxyType::Http,
            address: "u:p@10.0.0.1:3128".into(),
        });
        proxied.user_agent = Some("UA/1".into());
        proxied.partition = Some("acme".into());
        let image = |hints: &[(&str, &str)]| {
            use base64::Engine as _;
            let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
            png.extend(std::iter::repeat_n(b'q', 120));
            let body = base64::engine::general_purpose::STANDARD.encode(png);
            let mut pairs = vec![("body", body.as_str())];
            pairs.extend_from_slice(hints);
            SolveRequest::new(TaskParams::declared_of(Kind::Image, &pairs))
        };
        let cases = [
            (v2("https://example.com/login"), true),
            (v2("https://example.com/login?x=1#f"), false),
            (enterprise, true),
            (v2("not a url"), true),
            (proxied, true),
            (
                SolveRequest::new(TaskParams::declared_of(
                    Kind::CloudflareChallenge,
                    &[("pageurl", "https://example.com:444/x")],
                )),
                true,
            ),
            (
                SolveRequest::new(TaskParams::Declared {
                    kind: Kind::GeetestV3,
                    values: vec![
                        ("gt", "g".into()),
                        ("challenge", "c".into()),
                        ("pageurl", "http://geetest.example/p/".into()),
                    ],
                }),
                true,
            ),
            (
                SolveRequest::new(TaskParams::declared_of(
                    Kind::Text,
                    &[("textcaptcha", "2+2"), ("lang", "en")],
                )),
                true,
            ),
            (image(&[]), true),
            (
                image(&[
                    ("phrase", "1"),
                    ("regsense", "1"),
                    ("numeric", "3"),
                    ("calc", "1"),
                    ("min_len", "4"),
                    ("max_len", "8"),
                    ("language", "1"),
                    ("lang", "en"),
                    ("textinstructions", "type the \"red\" letters"),
                ]),
                true,
            ),
        ];
        let got: Vec<(String, String)> = cases
            .iter()
            .map(|(req, drop_query)| {
                let t = Target::of(
                    req,
                    TargetPolicy {
                        drop_query: *drop_query,
                    },
                );
                (t.id, t.label)
            })
            .collect();
        // Turnstile, the Cloudflare challenge and text kept theirs when they moved onto their
        // declarations (`Identity::Parts`).
        let want = [
            (
                "62b26b0b6b48010887b7c535021eb14e",
                "recaptcha_v2:example.com",
            ),
            (
                "5b199aee239c595f794634527beb6ef3",
                "recaptcha_v2:example.com",
            ),
            (
                "a3dbae081b279218458c308e0b60c723",
                "recaptcha_v2:shop.example.com:8443",
            ),
            ("8acb794af937d2220af2eb71c92b0b05", "recaptcha_v2:"),
            ("540dc15c9d86d2f93aacc633a3f0a464", "turnstile:example.com"),
            (
                "87592c447aa710e0d7e924476a5b6a7e",
                "cloudflare_challenge:example.com:444",
            ),
            // Changed once, when GeeTest v3 moved onto its declaration (every parameter
            // present, under its declared name): its answers are never pooled or shared (a
            // challenge is one page load's), so no pool or waiting line was split.
            (
                "df3d97c00389683e9d0cb1dc12072966",
                "geetest_v3:geetest.example",
            ),
            ("e5cb34cb0aae0887f2d72b2b58e295e9", "text"),
            // Images kept theirs too (`Identity::Computed`): the picture's digest and the
            // hints as one text, as when they were typed fields.
            ("34f1c1e2235001a8ecefd95c96025a24", "image"),
            ("1192990ea1d89b84b8ecc8742f7487e8", "image"),
        ];
        let got: Vec<(&str, &str)> = got.iter().map(|(i, l)| (i.as_str(), l.as_str())).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn fragment_query_and_case_do_not_split_a_target() {
        let p = TargetPolicy::default();
        let a = Target::of(&v2("https://Example.com/login?session=1#top"), p);
        let b = Target::of(&v2("https://example.com/login/"), p);
        assert_eq!(a, b);
        assert_eq!(a.label, "recaptcha_v2:example.com");
    }

    #[test]
    fn keeping_the_query_splits_targets_by_query() {
        let p = TargetPolicy { drop_query: false };
        let a = Target::of(&v2("https://example.com/login?x=1#frag"), p);
        let b = Target::of(&v2("https://example.com/login?x=2"), p);
        let c = Target::of(&v2("https://example.com/login?x=1"), p);
        assert_ne!(a, b);
        assert_eq!(a, c);
    }

    #[test]
    fn label_and_debug_never_show_proxy_credentials() {
        let mut req = v2("https://example.com/");
        req.proxy = Some(crate::model::Proxy {
            kind: crate::model::ProxyType::Http,
            address: "bob:hunter2@10.0.0.1:3128".into(),
        });
        let t = Target::of(&req, TargetPolicy::default());
        assert!(!format!("{t:?}{}{}", t.label, t.id).contains("hunter2"));
        assert!(!format!("{req:?}").contains("hunter2"));
        assert_ne!(
            t,
            Target::of(&v2("https://example.com/"), TargetPolicy::default())
        );
    }

    #[test]
    fn user_info_reaches_neither_label_nor_key() {
        let p = TargetPolicy::default();
        let with = Target::of(
            &v2("https://user:secret@Example.com:8443/login?token=abc"),
            p,
        );
        let without = Target::of(&v2("https://example.com:8443/login"), p);
        assert_eq!(with, without, "user info is not part of the page");
        assert_eq!(with.label, "recaptcha_v2:example.com:8443");
        let page = normalized("https://user:secret@example.com/a?token=abc#f", p).0;
        assert_eq!(page, "https://example.com/a");
        let req = v2("https://alice:s3cret@Example.com:8443/login?session=tok3n");
        for shown in [format!("{with:?}"), with.label.clone(), format!("{req:?}")] {
            for secret in ["alice", "s3cret", "secret", "tok3n", "abc", "@"] {
                assert!(!shown.contains(secret), "{secret} in {shown}");
            }
        }
        let cf = crate::model::SolveRequest::new(TaskParams::declared_of(
            Kind::CloudflareChallenge,
            &[("pageurl", "http://a:b@shop.example/x")],
        ));
        assert_eq!(
            Target::of(&cf, p).label,
            "cloudflare_challenge:shop.example"
        );
    }

    proptest! {
        #[test]
        fn labels_never_carry_user_info_or_query(
            user in "[a-zA-Z0-9%]{1,8}", pass in "[a-zA-Z0-9%:]{0,8}",
            host in "[a-z]{1,8}\\.[a-z]{2,3}", path in "(/[a-z0-9@:]{0,5}){0,3}",
            query in "[a-z0-9=&@:]{0,12}",
        ) {
            let url = format!("https://{user}:{pass}@{host}{path}?{query}");
            let t = Target::of(&v2(&url), TargetPolicy { drop_query: false });
            prop_assert_eq!(t.label, format!("recaptcha_v2:{host}"));
            let page = normalized(&url, TargetPolicy { drop_query: true }).0;
            prop_assert!(!page.contains('@') || path.contains('@'), "{}", page);
            prop_assert!(!page.contains('?'));
        }

        #[test]
        fn normalizing_any_text_never_panics(s in "\\PC{0,60}") {
            for drop_query in [true, false] {
                let _ = Target::of(&v2(&s), TargetPolicy { drop_query });
            }
        }

        #[test]
        fn normalization_is_idempotent(s in "https?://[a-zA-Z]{1,8}\\.[a-z]{2,3}(/[a-z0-9]{0,5}){0,3}/?(\\?[a-z=&]{0,8})?(#[a-z]{0,4})?") {
            for drop_query in [true, false] {
                let p = TargetPolicy { drop_query };
                let once = normalized(&s, p).0;
                prop_assert_eq!(normalized(&once, p).0, once.clone());
                prop_assert!(!once.contains('#'));
            }
        }

        #[test]
        fn different_sitekeys_are_different_targets(a in "[a-zA-Z0-9_-]{1,20}", b in "[a-zA-Z0-9_-]{1,20}") {
            let mk = |k: &str| {
                let mut r = v2("https://example.com/");
                if let TaskParams::Recaptcha { sitekey, .. } = &mut r.params { *sitekey = k.to_owned(); }
                Target::of(&r, TargetPolicy::default())
            };
            prop_assert_eq!(a == b, mk(&a) == mk(&b));
        }
    }
}
