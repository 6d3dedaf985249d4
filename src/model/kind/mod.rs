use std::fmt;
use std::str::FromStr;
use std::time::Duration;

mod catalog;
pub(crate) mod passthrough;
pub mod points;
mod spec;
pub mod table;

pub use passthrough::{PassProtocol, Passthrough, UNLISTED, documented as passthrough_documented};
pub use spec::{
    AnswerShape, Check, Dialect, Dialects, IdForm, Identity, MAX_COUNT, MAX_TEXT_LEN, MAX_WORD_LEN,
    PAGE, Param, Parameters, ProxyName, SITEKEY, Sourced, TaskName, TypeSpec,
};

/// How an answer of a kind may be handed out (docs/PROTOCOL.md, "Answer lifetimes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// One caller only. `poolable` says whether a spare answer may wait in a pool for the next
    /// caller of the same target (false for GeeTest, whose challenge is fresh per page load).
    SingleUse { poolable: bool },
    /// May be shared by every caller of the same target until it expires.
    Reusable,
}

/// Declares [`Kind`] from the catalog: one variant per declaration, in this order, which is
/// the order of [`Kind::ALL`] and of every table indexed by kind.
macro_rules! declare_kinds {
    ($($variant:ident => $spec:path,)*) => {
        /// The CAPTCHA type of a request. Its facts are its declaration in `catalog.rs`; the
        /// names (`as_str`) are part of the native API and of metric labels, so they never
        /// change.
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize,
            serde::Deserialize,
        )]
        #[serde(rename_all = "snake_case")]
        pub enum Kind {
            $($variant,)*
        }

        impl Kind {
            pub const ALL: [Kind; [$(stringify!($variant)),*].len()] = [$(Kind::$variant),*];

            /// Its declaration.
            pub fn spec(self) -> &'static TypeSpec {
                match self {
                    $(Kind::$variant => &$spec,)*
                }
            }
        }
    };
}

declare_kinds! {
    RecaptchaV2 => catalog::RECAPTCHA_V2,
    RecaptchaV3 => catalog::RECAPTCHA_V3,
    Turnstile => catalog::TURNSTILE,
    CloudflareChallenge => catalog::CLOUDFLARE_CHALLENGE,
    GeetestV3 => catalog::GEETEST_V3,
    Image => catalog::IMAGE,
    Text => catalog::TEXT,
    Hcaptcha => catalog::HCAPTCHA,
    Funcaptcha => catalog::FUNCAPTCHA,
    Mtcaptcha => catalog::MTCAPTCHA,
    FriendlyCaptcha => catalog::FRIENDLY_CAPTCHA,
    Lemin => catalog::LEMIN,
    Datadome => catalog::DATADOME,
    GeetestV4 => catalog::GEETEST_V4,
    Coordinates => catalog::COORDINATES,
    Other => catalog::OTHER,
}

impl Kind {
    /// Its place in [`Kind::ALL`], for tables indexed by kind.
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn as_str(self) -> &'static str {
        self.spec().name
    }

    pub fn reuse(self) -> Reuse {
        self.spec().reuse
    }

    /// How long an answer lives from the moment the provider reported it ready.
    pub fn default_lifetime(self) -> Duration {
        self.spec().lifetime.value
    }

    /// When the first poll for a task of this kind is worth making.
    pub fn typical_ready(self) -> Duration {
        self.spec().first_poll.value
    }

    /// The declared kind (`Parameters::Declared`) an `in.php` `method` asks for, where `flag`
    /// says which flags the caller set: a kind with an `inphp_flag` is asked for by its method
    /// and that flag, or that parameter of its own (a question's `textcaptcha`), before the
    /// kind its method is alone (an image's text); reCAPTCHA's `userrecaptcha` is read by hand.
    pub fn declared_by_method(method: &str, flag: impl Fn(&str) -> bool) -> Option<Kind> {
        let by_method = |kind: &Kind| {
            let spec = kind.spec();
            matches!(spec.params, Parameters::Declared(_))
                && spec.methods.iter().any(|m| m.eq_ignore_ascii_case(method))
        };
        let flagged = Kind::ALL
            .into_iter()
            .filter(by_method)
            .find(|kind| kind.spec().inphp_flag.is_some_and(&flag));
        flagged.or_else(|| {
            Kind::ALL
                .into_iter()
                .filter(by_method)
                .find(|kind| kind.spec().inphp_flag.is_none())
        })
    }

    /// A stored answer as JSON: the object for a kind whose answer is one (GeeTest, Lemin), the
    /// list of points for one whose answer is points, else (or where the text is neither) the
    /// text as a string.
    pub fn answer_value(self, text: &str) -> serde_json::Value {
        if let AnswerShape::Token { .. } = self.spec().answer {
            return serde_json::Value::String(self.spec().answer.token_parts(text).0.into_owned());
        }
        if let AnswerShape::Points { .. } = self.spec().answer {
            return serde_json::from_str(text)
                .ok()
                .filter(serde_json::Value::is_array)
                .unwrap_or_else(|| serde_json::Value::String(text.to_owned()));
        }
        let object = self
            .spec()
            .answer
            .is_object()
            .then(|| serde_json::from_str(text).ok());
        object
            .flatten()
            .filter(serde_json::Value::is_object)
            .unwrap_or_else(|| serde_json::Value::String(text.to_owned()))
    }

    /// Whether a provider speaking `dialect` solves it.
    pub fn solved_in(self, dialect: Dialect) -> bool {
        self.spec().solved_in().contains(dialect)
    }

    /// The kind a `createTask` type name asks for, and that name's declaration (case is
    /// ignored). Where two kinds share a name (anti-captcha's `TurnstileTask` also asks for a
    /// `cf_clearance` cookie), the first declared is meant; the task's fields tell the rest.
    pub fn by_task_name(type_name: &str) -> Option<(Kind, &'static TaskName)> {
        let wanted = type_name.trim();
        Kind::ALL.into_iter().find_map(|kind| {
            kind.spec()
                .task_names
                .iter()
                .find(|n| n.name.eq_ignore_ascii_case(wanted))
                .map(|n| (kind, n))
        })
    }

    /// The declared kind that shares `first`'s `createTask` name `type_name` and that this task
    /// asks for: one whose `task_version` is the task's `version`, or, when it sends none, one
    /// of whose own fields (under a name `first` does not use) the task carries. GeeTest v4 is
    /// told from v3 so.
    /// `has` says whether the task carries a field, `version` its `version`.
    pub fn sharing_task_name(
        first: Kind,
        type_name: &str,
        version: Option<u32>,
        has: impl Fn(&str) -> bool,
    ) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| {
            let spec = kind.spec();
            let shares = *kind != first
                && spec
                    .task_names
                    .iter()
                    .any(|n| n.name.eq_ignore_ascii_case(type_name.trim()));
            let versioned = spec
                .task_version
                .is_some_and(|v| version == Some(u32::from(v)));
            // A dialect's own spelling (CapSolver's `captchaId`, 2captcha v2's
            // `initParameters`) that `first` has no field under.
            let outer = |f: &'static str| Param::split_field(f).0;
            let own_field = spec.declared_params().iter().any(|p| {
                p.task_fields().filter(|f| *f != p.task).any(|f| {
                    let used_by_first = first
                        .spec()
                        .declared_params()
                        .iter()
                        .any(|q| q.task_fields().any(|g| outer(g) == outer(f)));
                    !used_by_first && has(outer(f))
                })
            });
            // A version sent decides; only without one do the fields.
            shares && (versioned || (version.is_none() && own_field))
        })
    }

    /// The name `dialect` takes for this kind, with or without the caller's proxy and as
    /// reCAPTCHA Enterprise or not; `None` where it has none.
    pub fn task_name(
        self,
        dialect: Dialect,
        proxied: bool,
        enterprise: bool,
    ) -> Option<&'static TaskName> {
        let proxy = if proxied {
            ProxyName::Proxied
        } else {
            ProxyName::Proxyless
        };
        self.spec().task_names.iter().find(|n| {
            n.dialects.contains(dialect)
                && (n.proxy == ProxyName::Either || n.proxy == proxy)
                && n.enterprise.is_none_or(|e| e == enterprise)
        })
    }

    /// The kind whose `createTask` name `type_name` carries a marker the task carries
    /// (`marked` says whether it carries `field` with `value`), with the marker's field:
    /// anti-captcha's `TurnstileTask` with `cloudflareTaskType: cf_clearance` is the Cloudflare
    /// challenge.
    pub fn marked_task_name(
        type_name: &str,
        marked: impl Fn(&str, &str) -> bool,
    ) -> Option<(Kind, &'static str)> {
        Kind::ALL.into_iter().find_map(|kind| {
            kind.spec().task_names.iter().find_map(|n| {
                let (field, value) = n.marker?;
                let named = n.name.eq_ignore_ascii_case(type_name.trim());
                (named && marked(field, value)).then_some((kind, field))
            })
        })
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Kind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<_> = Kind::ALL.iter().map(|k| k.as_str()).collect();
                format!("unknown kind `{s}`; expected one of {}", names.join(", "))
            })
    }
}

/// A request of a declared kind, built from its declaration alone: every parameter `createTask`
/// carries set to a value its check accepts, and the caller's proxy and browser where the kind
/// needs them. The encoders' and providers' tests run it for every declared kind.
#[cfg(test)]
pub(crate) fn declared_sample(kind: Kind) -> Option<crate::model::SolveRequest> {
    use crate::model::{Proxy, ProxyType, SolveRequest, TaskParams};
    let params = kind.spec().declared_params();
    if params.is_empty() {
        return None;
    }
    let values = params
        .iter()
        // One `createTask` has no field for keeps a task from `createTask` accounts.
        .filter(|p| p.in_task_api())
        .map(|p| {
            let value = match p.check {
                Check::Page => "https://example.com/login".to_owned(),
                Check::Key => format!("key-{}", p.name),
                Check::Text => format!("text-{}", p.name),
                Check::Flag => "1".to_owned(),
                Check::Object => r#"{"blob":"b10b"}"#.to_owned(),
                Check::Image => sample_image(p.name),
                Check::Count(max) => max.min(3).to_string(),
                Check::OneOf(words) => words[0].to_owned(),
            };
            (p.name, value)
        })
        .collect();
    let mut req = SolveRequest::new(TaskParams::Declared { kind, values });
    if kind.spec().needs_proxy {
        req.proxy = Some(Proxy {
            kind: ProxyType::Http,
            address: "u:secret@127.0.0.1:3128".into(),
        });
    }
    if kind.spec().needs_user_agent {
        req.user_agent = Some("Mozilla/5.0 (test)".into());
    }
    req.validate().expect("a sample is valid");
    Some(req)
}

/// A small PNG as base64, its bytes made distinct by `name`.
#[cfg(test)]
pub(crate) fn sample_image(name: &str) -> String {
    use base64::Engine as _;
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend(std::iter::repeat_n(b'p', 120));
    png.extend(name.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(png)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kinds_name_is_its_declarations_and_its_serde_name() {
        for kind in Kind::ALL {
            let serde_name = serde_json::to_value(kind).unwrap();
            assert_eq!(serde_name, kind.spec().name, "{kind:?}");
            assert_eq!(kind.as_str().parse::<Kind>(), Ok(kind));
        }
    }

    #[test]
    fn every_declaration_states_its_sources_and_solvers() {
        for kind in Kind::ALL {
            let spec = kind.spec();
            assert!(
                !spec.lifetime.source.is_empty(),
                "{kind}: a lifetime source"
            );
            assert!(
                !spec.first_poll.source.is_empty(),
                "{kind}: a first-poll source"
            );
            let passthrough = matches!(spec.params, Parameters::Passthrough);
            assert!(
                !spec.methods.is_empty() || passthrough,
                "{kind}: an in.php method"
            );
            assert!(
                Dialect::ALL.into_iter().any(|d| kind.solved_in(d)),
                "{kind}: some provider solves it"
            );
        }
    }

    #[test]
    fn every_name_a_dialect_takes_reads_back_as_its_kind() {
        for kind in Kind::ALL {
            for name in kind.spec().task_names {
                for dialect in Dialect::ALL {
                    if !name.dialects.contains(dialect) {
                        continue;
                    }
                    let proxied = name.proxy == ProxyName::Proxied;
                    let enterprise = name.enterprise == Some(true);
                    let sent = kind.task_name(dialect, proxied, enterprise);
                    assert!(sent.is_some(), "{kind} {dialect:?} {}", name.name);
                }
                let (back, _) = Kind::by_task_name(&name.name.to_ascii_uppercase())
                    .expect("a declared name is found");
                // anti-captcha's `TurnstileTask` is also the Cloudflare challenge's (its marker
                // tells them apart), and GeeTest v4 shares v3's names (its `task_version` does).
                let shared = (name.marker.is_some() && back == Kind::Turnstile)
                    || (kind.spec().task_version.is_some() && back == Kind::GeetestV3);
                assert!(back == kind || shared, "{} -> {back}", name.name);
            }
        }
        assert!(Kind::by_task_name("KeyCaptchaTaskProxyless").is_none());
    }

    /// Adding a declared kind is its declaration (`catalog.rs`) and its line in
    /// `declare_kinds!`: no product code outside this folder names one (tests may).
    /// A key some providers spell another way is read under either spelling and written under
    /// both (CaptchaAI's Lemin `challenge_uuid`, 2captcha's `challenge_id`).
    #[test]
    fn an_object_answer_carries_each_key_under_every_spelling() {
        let lemin = Kind::Lemin.spec().answer;
        for given in [
            r#"{"answer":"a","challenge_uuid":"c"}"#,
            r#"{"answer":"a","challenge_id":"c","extra":1}"#,
        ] {
            let stored: serde_json::Value =
                serde_json::from_str(&lemin.canonical(given.to_owned())).unwrap();
            assert_eq!(
                stored,
                serde_json::json!({"answer": "a", "challenge_id": "c", "challenge_uuid": "c"}),
                "{given}"
            );
        }
        assert_eq!(lemin.canonical("plain".into()), "plain");
        // hCaptcha keeps `respKey` beside its token when a provider gives one, whichever form
        // it came in; the writers split them again.
        let hcaptcha = Kind::Hcaptcha.spec().answer;
        let kept = r#"{"respKey":"E0_k","token":"P1_t"}"#;
        for given in [
            r#"{"gRecaptchaResponse":"P1_t","respKey":"E0_k","userAgent":"UA"}"#,
            r#"{"token":"P1_t","respKey":"E0_k"}"#,
        ] {
            assert_eq!(hcaptcha.canonical(given.to_owned()), kept, "{given}");
        }
        assert_eq!(
            hcaptcha.canonical(r#"{"gRecaptchaResponse":"P1_t"}"#.into()),
            "P1_t"
        );
        assert_eq!(hcaptcha.canonical("P1_t".into()), "P1_t");
        let (token, beside) = hcaptcha.token_parts(kept);
        assert_eq!(
            (token.as_ref(), beside),
            ("P1_t", vec![("respKey", "E0_k".to_owned())])
        );
        assert_eq!(hcaptcha.token_parts("P1_t"), ("P1_t".into(), vec![]));
        // A kind that keeps nothing beside its token never reads its text as an object.
        let turnstile = Kind::Turnstile.spec().answer;
        assert_eq!(turnstile.token_parts(kept), (kept.into(), vec![]));
        // GeeTest v3: 2captcha's `geetest_` keys and CaptchaAI's bare ones store alike.
        let geetest = Kind::GeetestV3.spec().answer;
        let both = serde_json::json!({
            "challenge": "c", "validate": "v", "seccode": "s",
            "geetest_challenge": "c", "geetest_validate": "v", "geetest_seccode": "s",
        });
        for given in [
            r#"{"geetest_challenge":"c","geetest_validate":"v","geetest_seccode":"s"}"#,
            r#"{"challenge":"c","validate":"v","seccode":"s"}"#,
        ] {
            let stored: serde_json::Value =
                serde_json::from_str(&geetest.canonical(given.to_owned())).unwrap();
            assert_eq!(stored, both, "{given}");
        }
    }

    #[test]
    fn a_declared_kind_is_named_only_in_its_declaration() {
        let declared: Vec<String> = Kind::ALL
            .into_iter()
            .filter(|k| !k.spec().declared_params().is_empty())
            .map(|k| format!("Kind::{k:?}"))
            .collect();
        assert!(!declared.is_empty());
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut dirs = vec![src.clone()];
        let mut read = 0;
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if path.is_dir() {
                    if path != src.join("model/kind") && name != "tests" {
                        dirs.push(path);
                    }
                    continue;
                }
                if !name.ends_with(".rs") || name == "tests.rs" {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                // The product part of the file: its unit tests may name any kind.
                let product = text.split("#[cfg(test)]").next().unwrap_or_default();
                for variant in &declared {
                    assert!(
                        !product.contains(variant.as_str()),
                        "{} names {variant}: a declared kind's facts belong in its declaration",
                        path.display()
                    );
                }
                read += 1;
            }
        }
        assert!(read > 100, "the source tree was read ({read} files)");
    }

    /// A kept identity reads declared parameters only: a part naming another would be empty
    /// for every request, and merge targets that differ.
    #[test]
    fn a_kept_identity_names_only_declared_parameters() {
        let mut kept = 0;
        for kind in Kind::ALL {
            let Identity::Parts(parts) = kind.spec().identity else {
                continue;
            };
            kept += 1;
            for part in parts {
                let declared = kind
                    .spec()
                    .declared_params()
                    .iter()
                    .any(|p| p.name == part.param);
                assert!(declared, "{kind}: `{}` is not declared", part.param);
                if matches!(part.form, IdForm::Page | IdForm::Host) {
                    assert_eq!(part.param, PAGE.name, "{kind}");
                }
            }
        }
        assert!(
            kept >= 2,
            "Turnstile and the Cloudflare challenge keep theirs"
        );
    }

    #[test]
    fn a_kinds_index_is_its_place_in_all() {
        for (i, kind) in Kind::ALL.iter().enumerate() {
            assert_eq!(kind.index(), i, "{kind:?}");
        }
    }
}
