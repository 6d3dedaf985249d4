use std::fmt;

use sha2::{Digest, Sha256};

use super::{Kind, SolveRequest, TaskParams};

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
        let mut parts: Vec<String> = vec![kind.as_str().to_owned()];
        let mut push = |name: &str, value: &str| parts.push(format!("{name}={value}"));
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
                let page = normalize_url(pageurl, policy);
                push("sitekey", sitekey);
                push("page", &page);
                push("enterprise", &enterprise.to_string());
                push("invisible", &invisible.to_string());
                push("action", action.as_deref().unwrap_or(""));
                push("min_score", min_score.as_deref().unwrap_or(""));
                push("data_s", data_s.as_deref().unwrap_or(""));
                push("domain", domain.as_deref().unwrap_or(""));
                format!("{kind}:{}", host_of(&page))
            }
            TaskParams::Turnstile {
                sitekey,
                pageurl,
                action,
                data,
                pagedata,
            } => {
                let page = normalize_url(pageurl, policy);
                push("sitekey", sitekey);
                push("page", &page);
                push("action", action.as_deref().unwrap_or(""));
                push("data", data.as_deref().unwrap_or(""));
                push("pagedata", pagedata.as_deref().unwrap_or(""));
                format!("{kind}:{}", host_of(&page))
            }
            TaskParams::CloudflareChallenge { pageurl, .. } => {
                // The clearance cookie is valid for the site's whole host, per proxy and UA.
                let host = host_of(&normalize_url(pageurl, policy));
                push("host", &host);
                format!("{kind}:{host}")
            }
            TaskParams::Geetest {
                gt,
                challenge,
                pageurl,
                api_server,
            } => {
                // The challenge is fresh per page load, so it is part of the identity.
                let page = normalize_url(pageurl, policy);
                push("gt", gt);
                push("challenge", challenge);
                push("page", &page);
                push("api_server", api_server.as_deref().unwrap_or(""));
                format!("{kind}:{}", host_of(&page))
            }
            TaskParams::Image { body, options } => {
                push("image", &hex::encode(Sha256::digest(body)));
                push("options", &format!("{options:?}"));
                kind.as_str().to_owned()
            }
            TaskParams::Text { text, lang } => {
                push("text", text);
                push("lang", lang.as_deref().unwrap_or(""));
                kind.as_str().to_owned()
            }
        };
        // An answer bound to a proxy or UA only works with that proxy and UA.
        if req.proxy.is_some() || kind == Kind::CloudflareChallenge {
            let proxy = req.proxy.as_ref();
            push("proxy", proxy.map(|p| p.address.as_str()).unwrap_or(""));
            push("proxytype", proxy.map(|p| p.kind.as_str()).unwrap_or(""));
            push("ua", req.user_agent.as_deref().unwrap_or(""));
        }
        // An isolated tenant's targets are its own (`pools = "isolated"`).
        if let Some(tenant) = &req.partition {
            push("tenant", tenant);
        }
        let mut hasher = Sha256::new();
        for part in &parts {
            // Length-prefixed so that no two part lists digest alike.
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        Target {
            kind,
            id: hex::encode(&hasher.finalize()[..16]),
            label,
        }
    }
}

/// Lower-cases scheme and host (the `url` crate does), drops user info (`user:secret@`) and the
/// fragment always and the query when the policy says so, and drops a trailing `/` on the path
/// unless it is the root. Unparsable URLs become an empty string: validation rejects them before
/// they get here, and whatever they hold must not reach a label.
///
/// User info is not part of the page: it is HTTP credentials for the site, which neither the
/// captcha's sitekey nor its token is bound to (the widget reports the page's origin, which has no
/// user info), so two URLs differing only in it are one target. Keeping it, even digested, would
/// split one site's pool by whoever's credentials came along.
pub fn normalize_url(raw: &str, policy: TargetPolicy) -> String {
    let Ok(mut url) = url::Url::parse(raw.trim()) else {
        return String::new();
    };
    // Both fail only for URLs that cannot have user info (no host), which have none to drop.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_fragment(None);
    if policy.drop_query {
        url.set_query(None);
    }
    let path = url.path().to_owned();
    if path.len() > 1 && path.ends_with('/') {
        url.set_path(path.trim_end_matches('/'));
    }
    url.to_string()
}

/// `host` or `host:port` of a normalized URL: the only part of a caller's page that reaches a
/// label (metrics, `/`, `/v1/pools`, logs). Never user info, path or query.
pub(super) fn host_of(url: &str) -> String {
    let Ok(url) = url::Url::parse(url) else {
        return String::new();
    };
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
        let page = normalize_url("https://user:secret@example.com/a?token=abc#f", p);
        assert_eq!(page, "https://example.com/a");
        let req = v2("https://alice:s3cret@Example.com:8443/login?session=tok3n");
        for shown in [format!("{with:?}"), with.label.clone(), format!("{req:?}")] {
            for secret in ["alice", "s3cret", "secret", "tok3n", "abc", "@"] {
                assert!(!shown.contains(secret), "{secret} in {shown}");
            }
        }
        let cf = crate::model::SolveRequest::new(TaskParams::CloudflareChallenge {
            pageurl: "http://a:b@shop.example/x".into(),
            sitekey: None,
        });
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
            let page = normalize_url(&url, TargetPolicy { drop_query: true });
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
                let once = normalize_url(&s, p);
                prop_assert_eq!(normalize_url(&once, p), once.clone());
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
